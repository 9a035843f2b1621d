/*
 * Piecewise orthonormal-Legendre functions evaluated at their own times, in one
 * pass (mechanisms/curves/result.py, `evaluate_local` for the Legendre basis).
 *
 * Function c has edges E = breakpoints[bp_offsets[c] : bp_offsets[c + 1]]
 * (k + 1 of them, k segments) and coefficients[seg_offsets[c] + r] (m, n) on
 * segment r = [E[r], E[r + 1]); it is evaluated at t[t_offsets[c] : ...]. A
 * time takes the segment of the last inner edge at or before it (segment 0
 * before the first inner edge, the last segment from the last one on): a time
 * on an inner edge takes the right segment. Outside [E[0], E[k]] the time is
 * clamped to it (mode 0, "clamp"), the value is 0 (mode 1, "zero"), or the end
 * segment's polynomial is continued (mode 2, "basis").
 *
 * On segment [a, b), L = b - a, s = 2(t - a)/L - 1:
 *     phi_l(t) = P_l(s) * (sqrt(2l + 1) * (1 / sqrt(L))),
 *     P_0 = 1, P_1 = s, P_{j+1} = ((2j + 1) s P_j - j P_{j-1}) / (j + 1),
 *     f_i(t) = phi_0 c[0][i] + phi_1 c[1][i] + ... (in that order).
 *
 * Arithmetic contract: each expression is evaluated in the order of the numpy
 * formulation (`LegendreBasis.columns` and the sum in `evaluate_local`), one
 * IEEE rounding per operation (-ffp-contract=off), so the values are the same
 * doubles as numpy's, bit for bit (tests/mechanisms/curves/test_evaluate_kernel.py).
 * The loop runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_buffer.h"

/* The segment of time x among the k segments of edges e[0..k]: the number of
 * inner edges e[1..k-1] at or before x. `hint` is the answer for the previous
 * time of the function (times usually come in order): walk from it, search
 * from scratch if x went back. */
static Py_ssize_t segment_of(const double *e, Py_ssize_t k, double x, Py_ssize_t hint)
{
    Py_ssize_t s = hint;
    if (s > 0 && !(e[s] <= x)) {  /* before this segment's inner edge: search */
        Py_ssize_t lo = 0, hi = k - 1;  /* answer in [lo, hi] */
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo + 1) / 2;
            if (e[mid] <= x) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        return lo;
    }
    while (s < k - 1 && e[s + 1] <= x) {
        s++;
    }
    return s;
}

typedef struct {
    const double *t, *edges, *coef;
    const int64_t *t_off, *bp_off, *seg_off;
    Py_ssize_t functions;
    int degree, m, n, mode;
    double *out;
    double *norm, *p;  /* sqrt(2l + 1); P_l of one time */
} Job;

/* All functions; 0, or -1 on a time that is not finite. */
static int evaluate_all(Job *jb)
{
    const int m = jb->m, n = jb->n;
    for (Py_ssize_t c = 0; c < jb->functions; c++) {
        const double *e = jb->edges + jb->bp_off[c];
        const Py_ssize_t k = (Py_ssize_t)(jb->bp_off[c + 1] - jb->bp_off[c]) - 1;
        const double *coef = jb->coef + (Py_ssize_t)jb->seg_off[c] * m * n;
        const double first = e[0], last = e[k];
        Py_ssize_t s = 0;
        for (Py_ssize_t i = (Py_ssize_t)jb->t_off[c]; i < (Py_ssize_t)jb->t_off[c + 1]; i++) {
            const double t = jb->t[i];
            if (!isfinite(t)) {
                return -1;
            }
            double *out = jb->out + i * n;
            if (jb->mode == 1 && (t < first || t > last)) {
                for (int j = 0; j < n; j++) {
                    out[j] = 0.0;
                }
                continue;
            }
            double x = t;
            if (jb->mode != 2) {  /* np.clip(t, first, last) */
                x = x < first ? first : x;
                x = x > last ? last : x;
            }
            s = segment_of(e, k, x, s);
            const double a = e[s], b = e[s + 1];
            const double length = b - a;
            const double u = 2.0 * (x - a) / length - 1.0;
            const double inv = 1.0 / sqrt(length);
            double *p = jb->p;
            p[0] = 1.0;
            if (jb->degree >= 1) {
                p[1] = u;
            }
            for (int q = 1; q < jb->degree; q++) {
                p[q + 1] = ((double)(2 * q + 1) * u * p[q] - (double)q * p[q - 1]) / (double)(q + 1);
            }
            const double *row = coef + s * m * n;
            for (int j = 0; j < n; j++) {
                double acc = p[0] * (jb->norm[0] * inv) * row[j];
                for (int l = 1; l < m; l++) {
                    acc = acc + p[l] * (jb->norm[l] * inv) * row[l * n + j];
                }
                out[j] = acc;
            }
        }
    }
    return 0;
}

PyDoc_STRVAR(legendre_doc,
"legendre(t, t_offsets, breakpoints, bp_offsets, coefficients, seg_offsets, mode, out)\n"
"\n"
"Fill out (len(t), n) with the piecewise orthonormal-Legendre functions (coefficients\n"
"(K, m, n)) at their own times; mode 0 clamp, 1 zero, 2 basis (see _evaluate.c).\n"
"Offsets are int64, everything else float64.");

static PyObject *legendre(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[7];
    int mode;
    static const char *names[] = {"t", "t_offsets", "breakpoints", "bp_offsets",
                                  "coefficients", "seg_offsets", "out"};
    static const int ints[] = {0, 1, 0, 1, 0, 1, 0};
    if (!PyArg_ParseTuple(args, "OOOOOOiO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4],
                          &obj[5], &mode, &obj[6])) {
        return NULL;
    }
    Py_buffer view[7];
    int got = 0, rc = 0;
    PyObject *result = NULL;
    double *scratch = NULL;
    for (; got < 7; got++) {
        if (kernel_buffer(obj[got], &view[got], got == 6, ints[got] ? 'q' : 'd', "legendre",
                          names[got]) < 0) {
            goto done;
        }
    }
    const Py_ssize_t times = view[0].len / 8, functions = view[1].len / 8 - 1;
    if (view[4].ndim != 3 || view[6].ndim != 2 || mode < 0 || mode > 2 || functions < 0 ||
        view[3].len / 8 != functions + 1 || view[5].len / 8 != functions + 1 ||
        view[6].shape[0] != times || view[6].shape[1] != view[4].shape[2]) {
        PyErr_SetString(PyExc_ValueError, "legendre: inconsistent shapes");
        goto done;
    }
    const int m = (int)view[4].shape[1], n = (int)view[4].shape[2];
    const int64_t *t_off = view[1].buf, *bp_off = view[3].buf, *seg_off = view[5].buf;
    const Py_ssize_t edges = view[2].len / 8, rows = view[4].shape[0];
    for (Py_ssize_t c = 0; c < functions; c++) {  /* every index below stays in its array */
        const int64_t k = bp_off[c + 1] - bp_off[c] - 1;
        if (m < 1 || n < 1 || k < 1 || bp_off[c] < 0 || bp_off[c + 1] > edges ||
            seg_off[c] < 0 || seg_off[c + 1] - seg_off[c] != k || seg_off[c + 1] > rows ||
            t_off[c] < 0 || t_off[c + 1] < t_off[c] || t_off[c + 1] > times) {
            PyErr_SetString(PyExc_ValueError, "legendre: offsets do not match the arrays");
            goto done;
        }
    }
    scratch = malloc(sizeof(double) * 2 * (size_t)m);
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    for (int l = 0; l < m; l++) {
        scratch[l] = sqrt(2.0 * l + 1.0);
    }
    Job jb = {.t = view[0].buf, .edges = view[2].buf, .coef = view[4].buf, .t_off = t_off,
              .bp_off = bp_off, .seg_off = seg_off, .functions = functions, .degree = m - 1,
              .m = m, .n = n, .mode = mode, .out = view[6].buf, .norm = scratch,
              .p = scratch + m};
    Py_BEGIN_ALLOW_THREADS
    rc = evaluate_all(&jb);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, "legendre: a time is not finite");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    free(scratch);
    for (int k = 0; k < got; k++) {
        PyBuffer_Release(&view[k]);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"legendre", legendre, METH_VARARGS, legendre_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_evaluate",
    "Piecewise Legendre functions evaluated in one pass (see _evaluate.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__evaluate(void)
{
    return PyModule_Create(&module);
}
