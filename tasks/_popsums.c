/*
 * The population view's per-chunk sums of released stream reports, two passes in C.
 *
 * tasks/population_scan.py (`chunk_sums`) sums each chunk of a stream release's
 * reports as the chunk is collected: per step the count n, Σk and Σk² of the
 * reports y = k·Λ on the release grid Λ = 2^-24, and per (step, grid interval)
 * the count of reports, the interval [lo, hi) being the SQL's (`_INTERVALS`):
 *
 *     lo = clip(ceil((y − b)·B − ½), 0, B),  hi = clip(floor((y + b)·B − ½) + 1, 0, B)
 *
 * in IEEE doubles, operation for operation (-ffp-contract=off: no fused
 * multiply-add; floor and ceil are exact, computed without libm). `moments` checks every report
 * (on the grid, finite, inside [lower, upper] after ×Λ, |k| < 2^26) and sums
 * n, Σk and Σk² in three int64 parts (k = kh·2^13 + kl, 0 <= kl < 2^13:
 * Σkh², Σkh·kl, Σkl², as the numpy formulation it replaces), and counts each
 * (lo, hi) pair; `interval_counts` counts per (step, pair), the pairs numbered
 * by `code`. Integer sums only: the results are exact, whatever the order.
 * tests/tasks/test_population_scan.py checks both against DuckDB's SQL.
 *
 * No Python object is touched between Py_BEGIN_ALLOW_THREADS and
 * Py_END_ALLOW_THREADS: a chunk is summed without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "kernel_buffer.h"

/* B, the population distribution's grid (tasks/population_scan.py's GRID_SIZE, which
 * each call passes and is checked against this): a constant, so that the clamps below
 * compile to conditional moves, not branches (twice as fast, measured). */
#define GRID 64
#define WIDTH (GRID + 1) /* lo and hi each take 0..B */

/* floor(x) and ceil(x) of a double of magnitude below 2^62, without libm (whose calls
 * cost more than the rest of a report) and without a branch: truncation, then one step
 * toward -inf (+inf) when it rounded the other way. */
static inline int64_t floor_of(double x)
{
    const int64_t t = (int64_t)x;
    return t - ((double)t > x);
}

static inline int64_t ceil_of(double x)
{
    const int64_t t = (int64_t)x;
    return t + ((double)t < x);
}

/* Interval pair lo·(B + 1) + hi of report y (the SQL's expressions); y within Square
 * Wave's support (checked by `moments`), so the products are small. */
static inline int64_t pair_of(double y, double b)
{
    int64_t lo = ceil_of((y - b) * (double)GRID - 0.5);
    lo = lo < 0 ? 0 : (lo > GRID ? GRID : lo);
    int64_t hi = floor_of((y + b) * (double)GRID - 0.5) + 1;
    hi = hi < 0 ? 0 : (hi > GRID ? GRID : hi);
    return lo * WIDTH + hi;
}

/* A ValueError (-1) unless the caller's grid is the one compiled in. */
static int check_grid(Py_ssize_t grid_size)
{
    if (grid_size != GRID) {
        PyErr_Format(PyExc_ValueError, "_popsums: built for a grid of %d, not %zd", GRID,
                     grid_size);
        return -1;
    }
    return 0;
}

/* Release the views got so far; return `result` (NULL on an error). */
static PyObject *released(Py_buffer *view, int got, PyObject *result)
{
    for (int i = 0; i < got; i++) {
        PyBuffer_Release(&view[i]);
    }
    return result;
}

PyDoc_STRVAR(moments_doc,
"moments(idx, y, offset, b, grid_size, step, lower, upper, k_limit, low_bits,\n"
"        n, s1, hh, hl, ll, pairs) -> bool\n"
"\n"
"Add report r (y[r] = k·step, float64) to cell idx[r] - offset (int64) of n, s1 (Σk),\n"
"hh, hl, ll (Σkh², Σkh·kl, Σkl² with k = kh·2^low_bits + kl; int64, one per cell) and\n"
"its interval pair to pairs (int64, (grid_size + 1)^2). False (sums partial) at the\n"
"first report off the grid, not finite, outside [lower, upper] or with |k| >= k_limit.\n"
"A cell outside the arrays is a ValueError.");

static PyObject *moments(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[8];
    Py_ssize_t offset, grid_size;
    double b, step, lower, upper, k_limit;
    int low_bits;
    if (!PyArg_ParseTuple(args, "OOndnddddi" "OOOOOO", &obj[0], &obj[1], &offset, &b,
                          &grid_size, &step, &lower, &upper, &k_limit, &low_bits, &obj[2],
                          &obj[3], &obj[4], &obj[5], &obj[6], &obj[7]) ||
        check_grid(grid_size) < 0) {
        return NULL;
    }
    if (low_bits < 1 || low_bits > 30 || !(k_limit > 0.0 && k_limit <= 4503599627370496.0)) {
        PyErr_SetString(PyExc_ValueError, "moments: low_bits in 1..30, 0 < k_limit <= 2^52");
        return NULL;
    }
    static const char want[] = "qdqqqqqq";
    static const char *names[] = {"idx", "y", "n", "s1", "hh", "hl", "ll", "pairs"};
    Py_buffer view[8];
    int got = 0;
    for (; got < 8; got++) {
        if (kernel_buffer(obj[got], &view[got], got >= 2, want[got], "moments",
                          names[got]) < 0) {
            return released(view, got, NULL);
        }
    }
    const Py_ssize_t rows = view[0].shape[0], cells = view[2].shape[0];
    int shapes_ok = view[1].shape[0] == rows && view[7].shape[0] == WIDTH * WIDTH;
    for (int i = 3; i < 7; i++) {
        shapes_ok = shapes_ok && view[i].shape[0] == cells;
    }
    if (!shapes_ok) {
        PyErr_SetString(PyExc_ValueError, "moments: inconsistent shapes");
        return released(view, got, NULL);
    }
    const int64_t *restrict idx = view[0].buf;
    const double *restrict y = view[1].buf;
    int64_t *restrict n = view[2].buf, *restrict s1 = view[3].buf, *restrict hh = view[4].buf,
            *restrict hl = view[5].buf, *restrict ll = view[6].buf, *restrict pairs = view[7].buf;
    const double inv = 1.0 / step;
    const int64_t scale = (int64_t)1 << low_bits;
    const double inv_scale = 1.0 / (double)scale; /* a power of two: k·inv_scale is exact */
    int valid = 1, in_range = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows; r++) {
        const double k = y[r] * inv;
        /* written so that NaN fails: then k is finite and below 2^52, so the cast is exact
         * for an integer k, and k is on the grid exactly when the cast gives it back */
        if (!(k < k_limit && -k < k_limit && k * step >= lower && k * step <= upper) ||
            (double)(int64_t)k != k) {
            valid = 0;
            break;
        }
        const int64_t c = idx[r] - (int64_t)offset;
        if (c < 0 || c >= cells) {
            in_range = 0;
            break;
        }
        const int64_t kk = (int64_t)k, kh = floor_of(k * inv_scale), kl = kk - kh * scale;
        n[c] += 1;
        s1[c] += kk;
        hh[c] += kh * kh;
        hl[c] += kh * kl;
        ll[c] += kl * kl;
        pairs[pair_of(y[r], b)] += 1;
    }
    Py_END_ALLOW_THREADS
    if (!in_range) {
        PyErr_SetString(PyExc_ValueError, "moments: a report's cell is outside the arrays");
        return released(view, got, NULL);
    }
    return released(view, got, PyBool_FromLong(valid));
}

PyDoc_STRVAR(interval_counts_doc,
"interval_counts(idx, y, offset, b, grid_size, code, counts)\n"
"\n"
"Add 1 to counts[(idx[r] - offset) * P + code[pair of y[r]]] for every report r, where\n"
"code (int64, (grid_size + 1)^2) numbers the P pairs that occur and counts (int64) has P per\n"
"cell. Reports must have passed `moments`. A cell or code outside counts is a ValueError.");

static PyObject *interval_counts(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[4];
    Py_ssize_t offset, grid_size;
    double b;
    if (!PyArg_ParseTuple(args, "OOndnOO", &obj[0], &obj[1], &offset, &b, &grid_size, &obj[2],
                          &obj[3]) || check_grid(grid_size) < 0) {
        return NULL;
    }
    static const char want[] = "qdqq";
    static const char *names[] = {"idx", "y", "code", "counts"};
    Py_buffer view[4];
    int got = 0;
    for (; got < 4; got++) {
        if (kernel_buffer(obj[got], &view[got], got == 3, want[got], "interval_counts",
                          names[got]) < 0) {
            return released(view, got, NULL);
        }
    }
    const Py_ssize_t rows = view[0].shape[0], total = view[3].shape[0];
    if (view[1].shape[0] != rows || view[2].shape[0] != WIDTH * WIDTH) {
        PyErr_SetString(PyExc_ValueError, "interval_counts: inconsistent shapes");
        return released(view, got, NULL);
    }
    const int64_t *restrict idx = view[0].buf, *restrict code = view[2].buf;
    const double *restrict y = view[1].buf;
    int64_t *restrict counts = view[3].buf;
    int64_t present = 0;
    for (Py_ssize_t p = 0; p < WIDTH * WIDTH; p++) {
        present = code[p] >= present ? code[p] + 1 : present;
    }
    int in_range = present > 0 && total % present == 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; in_range && r < rows; r++) {
        const int64_t c = idx[r] - (int64_t)offset, p = code[pair_of(y[r], b)];
        const int64_t at = c * present + p;
        if (c < 0 || p < 0 || p >= present || at >= total) {
            in_range = 0;
            break;
        }
        counts[at] += 1;
    }
    Py_END_ALLOW_THREADS
    if (!in_range) {
        PyErr_SetString(PyExc_ValueError,
                        "interval_counts: a report's cell or pair is outside counts");
        return released(view, got, NULL);
    }
    return released(view, got, Py_NewRef(Py_None));
}

static PyMethodDef methods[] = {
    {"moments", moments, METH_VARARGS, moments_doc},
    {"interval_counts", interval_counts, METH_VARARGS, interval_counts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_popsums",
    "The population view's per-chunk sums of stream reports (see _popsums.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__popsums(void)
{
    return PyModule_Create(&module);
}
