/*
 * Leaf sums of the dyadic moment forest (mechanisms/curves/forest.py), in one pass.
 *
 * For every curve c and every leaf k of its finest level (2^J equal parts of
 * [lo_c, hi_c], in leaf units u = (t - lo_c) * scale_c), the sums over the
 * curve's linear pieces of the exact moments (see forest.py, `_leaf_sums`):
 *
 *     for p = 0..degree, for each value column j:  sum of the integral of q_j * s^p du
 *     and the integral of |q|^2 du,
 *
 * q the piecewise-linear interpolant of the centred values (value minus the
 * curve's mean), s = 2(u - k) - 1 the leaf's local coordinate. A piece over
 * leaf edges is cut at them. Closed forms for degree <= 1, Gauss-Legendre
 * nodes (given by the caller) above.
 *
 * Arithmetic contract. The result is the same double, bit for bit, as the
 * numpy formulation it replaces (kept as the test reference,
 * tests/mechanisms/curves/forest_reference.py), so a release's bytes do not
 * depend on which ran:
 *   - every elementwise expression is evaluated in the same order, one IEEE
 *     rounding per operation (compile with -ffp-contract=off: no fused
 *     multiply-add, no -ffast-math);
 *   - a segmented sum ("per leaf", "per curve") is numpy's np.add.reduceat: the
 *     first term plus numpy's pairwise sum of the others (`pairwise`, numpy's
 *     loops_utils.h.src: 8 accumulators up to 128 terms, halves above);
 *   - a sum over the Gauss-Legendre nodes is numpy's np.sum over that axis
 *     (the pairwise sum of the terms);
 *   - a curve longer than `block` samples is summed block by block, blocks cut
 *     every `block` pieces from its own first sample, and each leaf adds the
 *     blocks' sums in order to 0.0; other curves are summed whole.
 * The tests compare this module with the reference on random curves (jumps,
 * pieces over many leaves, long curves, every degree) for exact equality.
 *
 * No Python object is touched between Py_BEGIN_ALLOW_THREADS and
 * Py_END_ALLOW_THREADS: the loops run without the GIL, so worker threads of a
 * release run their chunks' forests in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_buffer.h"

#define PW_BLOCKSIZE 128

static double pairwise_split(const double *a, Py_ssize_t n, Py_ssize_t stride);

/* numpy's pairwise sum of a[0], a[stride], ..., n terms (loops_utils.h.src). */
static inline double pairwise(const double *a, Py_ssize_t n, Py_ssize_t stride)
{
    if (n < 8) {
        double res = 0.;
        for (Py_ssize_t i = 0; i < n; i++) {
            res += a[i * stride];
        }
        return res;
    }
    if (n <= PW_BLOCKSIZE) {  /* eight accumulators (scalars, so they stay in registers) */
        double r0 = a[0], r1 = a[stride], r2 = a[2 * stride], r3 = a[3 * stride];
        double r4 = a[4 * stride], r5 = a[5 * stride], r6 = a[6 * stride], r7 = a[7 * stride];
        Py_ssize_t i;
        for (i = 8; i < n - (n % 8); i += 8) {
            const double *b = a + i * stride;
            r0 += b[0];
            r1 += b[stride];
            r2 += b[2 * stride];
            r3 += b[3 * stride];
            r4 += b[4 * stride];
            r5 += b[5 * stride];
            r6 += b[6 * stride];
            r7 += b[7 * stride];
        }
        double res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
        for (; i < n; i++) {
            res += a[i * stride];
        }
        return res;
    }
    return pairwise_split(a, n, stride);
}

/* Above PW_BLOCKSIZE terms: the two halves, the first a multiple of 8 terms. */
static double pairwise_split(const double *a, Py_ssize_t n, Py_ssize_t stride)
{
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2, stride) + pairwise(a + n2 * stride, n - n2, stride);
}

/* np.add.reduceat over one segment of n >= 1 terms: the first plus the pairwise rest. */
static inline double segment_sum(const double *a, Py_ssize_t n, Py_ssize_t stride)
{
    if (n == 1) {
        return a[0];
    }
    return a[0] + pairwise(a + stride, n - 1, stride);
}

/* The fixed inputs of one call. */
typedef struct {
    int n;            /* value columns */
    int degree;
    int terms;        /* (degree + 1) * n + 1 outputs per piece */
    double n_leaf;    /* 2^J as a double */
    Py_ssize_t leaves;
    int nodes;        /* Gauss-Legendre nodes (degree >= 2) */
    const double *x;  /* nodes on [-1, 1] */
    const double *w;  /* weights */
    double *frac;     /* 0.5 * (1 + x), per node */
    double *wq;       /* scratch: nodes * n */
    double *power;    /* scratch: nodes */
    double *s;        /* scratch: nodes */
    double *prod;     /* scratch: nodes */
} Spec;

/*
 * The closed-form moments (degree <= 1) of one (sub-)piece [u0, u1] of leaf
 * `leaf` with values q0 -> q1 (n columns), written to out[0], out[stride], ...
 * (terms outputs): the n moments of degree 0, those of degree 1, the energy.
 * forest.py's `_part_sums`, term by term.
 */
static inline void low_moments(const Spec *sp, double u0, double u1, const double *q0,
                               const double *q1, double leaf, double *out, Py_ssize_t stride)
{
    const int n = sp->n;
    const double h = u1 - u0, half_h = 0.5 * h;
    const double smid = (u0 + u1) - (2.0 * leaf + 1.0), h2 = h * h / 6.0;
    double energy = 0.0;
    for (int j = 0; j < n; j++) {
        const double a = q0[j] + q1[j], d = q1[j] - q0[j];
        const double m0 = half_h * a;
        out[j * stride] = m0;
        if (sp->degree == 1) {
            out[(n + j) * stride] = m0 * smid + h2 * d;
        }
        energy = j == 0 ? 3.0 * a * a + d * d : energy + 3.0 * a * a + d * d;
    }
    out[(sp->terms - 1) * stride] = h * energy / 12.0;
}

/*
 * The moments of one (sub-)piece [u0, u1] of leaf `leaf` with values q0 -> q1
 * (n columns), written to out[0], out[stride], ... (terms outputs): for each
 * p the n moments, then the energy. forest.py's `_part_sums`, term by term.
 */
static void piece_moments(const Spec *sp, double u0, double u1, const double *q0,
                          const double *q1, double leaf, double *out, Py_ssize_t stride)
{
    const int n = sp->n;
    const double h = u1 - u0;
    double total0 = q0[0] + q1[0], diff0 = q1[0] - q0[0];
    if (sp->degree <= 1) {
        const double half_h = 0.5 * h;
        for (int j = 0; j < n; j++) {
            out[j * stride] = half_h * (q0[j] + q1[j]);
        }
        if (sp->degree == 1) {
            const double smid = (u0 + u1) - (2.0 * leaf + 1.0);
            const double h2 = h * h / 6.0;
            for (int j = 0; j < n; j++) {
                const double m0 = out[j * stride];
                out[(n + j) * stride] = m0 * smid + h2 * (q1[j] - q0[j]);
            }
        }
    } else {
        const double smid = (u0 + u1) - (2.0 * leaf + 1.0);
        const double half_h = 0.5 * h;
        const int nodes = sp->nodes;
        for (int k = 0; k < nodes; k++) {
            sp->s[k] = smid + h * sp->x[k];
            sp->power[k] = 1.0;
        }
        for (int j = 0; j < n; j++) {
            const double d = q1[j] - q0[j];
            for (int k = 0; k < nodes; k++) {
                sp->wq[j * nodes + k] = half_h * sp->w[k] * (q0[j] + d * sp->frac[k]);
            }
        }
        for (int p = 0; p <= sp->degree; p++) {
            for (int j = 0; j < n; j++) {
                for (int k = 0; k < nodes; k++) {
                    sp->prod[k] = sp->power[k] * sp->wq[j * nodes + k];
                }
                out[(p * n + j) * stride] = pairwise(sp->prod, nodes, 1);
            }
            for (int k = 0; k < nodes; k++) {
                sp->power[k] = sp->power[k] * sp->s[k];
            }
        }
    }
    double energy = 3.0 * total0 * total0 + diff0 * diff0;
    for (int j = 1; j < n; j++) {
        const double a = q0[j] + q1[j], d = q1[j] - q0[j];
        energy = energy + 3.0 * a * a + d * d;
    }
    out[(sp->terms - 1) * stride] = h * energy / 12.0;
}

/* A growable buffer of sub-piece moments (terms per entry) and their leaves. */
typedef struct {
    double *mom;      /* terms x cap, term-major */
    Py_ssize_t *leaf;
    Py_ssize_t size, cap;
} SubPieces;

static int sub_reserve(SubPieces *sb, int terms, Py_ssize_t want)
{
    if (want <= sb->cap) {
        return 0;
    }
    Py_ssize_t cap = sb->cap ? sb->cap : 64;
    while (cap < want) {
        cap *= 2;
    }
    double *mom = malloc(sizeof(double) * (size_t)terms * (size_t)cap);
    Py_ssize_t *leaf = malloc(sizeof(Py_ssize_t) * (size_t)cap);
    if (!mom || !leaf) {
        free(mom);
        free(leaf);
        return -1;
    }
    for (int k = 0; k < terms; k++) {  /* term-major: keep each term's entries */
        memcpy(mom + (size_t)k * cap, sb->mom + (size_t)k * sb->cap,
               sizeof(double) * (size_t)sb->size);
    }
    memcpy(leaf, sb->leaf, sizeof(Py_ssize_t) * (size_t)sb->size);
    free(sb->mom);
    free(sb->leaf);
    sb->mom = mom;
    sb->leaf = leaf;
    sb->cap = cap;
    return 0;
}

/*
 * The moments of the pieces of one block that lie inside one leaf, degree <= 1
 * (`_part_sums`'s closed forms), for all its pieces at once: one loop per
 * output over the block, so the compiler can vectorise them. A piece over
 * leaf edges (cross[i]) enters with u0 = u1 = 0 (a zero-length entry, as the
 * numpy formulation sums it); its sub-pieces are summed apart.
 */
static void whole_moments(const Spec *sp, const double *u, const double *cols,
                          Py_ssize_t cstride, Py_ssize_t count, const double *leaf,
                          const unsigned char *cross, double *whole, double *h,
                          double *smid, double *energy)
{
    const int n = sp->n;
    for (Py_ssize_t i = 0; i < count; i++) {
        const double ua = cross[i] ? 0.0 : u[i], ub = cross[i] ? 0.0 : u[i + 1];
        h[i] = ub - ua;
        smid[i] = (ua + ub) - (2.0 * leaf[i] + 1.0);
    }
    for (int j = 0; j < n; j++) {
        const double *c = cols + j * cstride;
        double *mom0 = whole + (Py_ssize_t)j * count;
        for (Py_ssize_t i = 0; i < count; i++) {
            mom0[i] = 0.5 * h[i] * (c[i] + c[i + 1]);
        }
        if (sp->degree == 1) {
            double *mom1 = whole + (Py_ssize_t)(n + j) * count;
            for (Py_ssize_t i = 0; i < count; i++) {
                mom1[i] = mom0[i] * smid[i] + h[i] * h[i] / 6.0 * (c[i + 1] - c[i]);
            }
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            const double a = c[i] + c[i + 1], d = c[i + 1] - c[i];
            energy[i] = j == 0 ? 3.0 * a * a + d * d : energy[i] + 3.0 * a * a + d * d;
        }
    }
    double *out = whole + (Py_ssize_t)(sp->terms - 1) * count;
    for (Py_ssize_t i = 0; i < count; i++) {
        out[i] = h[i] * energy[i] / 12.0;
    }
}

/* Block scratch: per piece of a block (at most `block` pieces). */
typedef struct {
    double *whole;        /* terms x pieces, term-major */
    double *leaf, *h, *smid, *energy;
    unsigned char *cross;
    Py_ssize_t *wleaf;
    double *q0, *q1, *ql, *qr;  /* n values of one piece */
    SubPieces sub;
} Block;

/*
 * One block of `count` pieces (piece i joins rows i and i + 1): u (leaf units,
 * count + 1 rows) and cols (centred values, column j at cols + j * cstride).
 * Adds each touched leaf's sums to acc (terms x (curves * leaves), term-major)
 * from column `base` (the curve's first leaf). Returns 0, or -1 when out of
 * memory, -2 on a leaf outside the curve (not a finite curve).
 */
static int block_sums(const Spec *sp, const double *u, const double *cols, Py_ssize_t cstride,
                      Py_ssize_t count, double *acc, Py_ssize_t acc_stride, Py_ssize_t base,
                      Block *bk)
{
    const int n = sp->n, terms = sp->terms;
    const double top = sp->n_leaf - 1.0;
    SubPieces *sb = &bk->sub;
    int crossing = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const double a = u[i];
        if (!(a >= 0.0 && a <= sp->n_leaf && u[i + 1] >= a)) {  /* also NaN */
            return -2;
        }
        double leaf = (double)(int64_t)a;  /* floor: a >= 0 */
        leaf = leaf < top ? leaf : top;    /* np.minimum(floor(u0), n_leaf - 1) */
        bk->leaf[i] = leaf;
        bk->wleaf[i] = (Py_ssize_t)leaf;
        bk->cross[i] = u[i + 1] > leaf + 1.0;
        crossing |= bk->cross[i];
    }
    if (sp->degree <= 1) {
        whole_moments(sp, u, cols, cstride, count, bk->leaf, bk->cross, bk->whole, bk->h,
                      bk->smid, bk->energy);
    } else {
        for (Py_ssize_t i = 0; i < count; i++) {
            for (int j = 0; j < n; j++) {
                bk->q0[j] = cols[j * cstride + i];
                bk->q1[j] = cols[j * cstride + i + 1];
            }
            const double u0 = bk->cross[i] ? 0.0 : u[i], u1 = bk->cross[i] ? 0.0 : u[i + 1];
            piece_moments(sp, u0, u1, bk->q0, bk->q1, bk->leaf[i], bk->whole + i, count);
        }
    }
    sb->size = 0;
    for (Py_ssize_t i = 0; crossing && i < count; i++) {
        if (!bk->cross[i]) {
            continue;
        }
        /* one sub-piece per leaf the piece touches, values interpolated at the edges */
        const double a = u[i], b = u[i + 1], leaf = bk->leaf[i];
        const double last = ceil(b);
        if (!(last <= sp->n_leaf)) {
            return -2;
        }
        const Py_ssize_t parts = (Py_ssize_t)(last - leaf);
        if (sub_reserve(sb, terms, sb->size + parts) < 0) {
            return -1;
        }
        for (int j = 0; j < n; j++) {
            bk->q0[j] = cols[j * cstride + i];
            bk->q1[j] = cols[j * cstride + i + 1];
        }
        for (Py_ssize_t m = 0; m < parts; m++) {
            const double k = leaf + (double)m;
            const double lft = a > k ? a : k;
            const double kr = k + 1.0;
            const double rgt = b < kr ? b : kr;
            for (int j = 0; j < n; j++) {
                const double v0 = bk->q0[j], v1 = bk->q1[j];
                const double slope = (v1 - v0) / (b - a);
                bk->ql[j] = lft == a ? v0 : v0 + slope * (lft - a);
                bk->qr[j] = rgt == b ? v1 : v0 + slope * (rgt - a);
            }
            if (sp->degree <= 1) {
                low_moments(sp, lft, rgt, bk->ql, bk->qr, k, sb->mom + sb->size, sb->cap);
            } else {
                piece_moments(sp, lft, rgt, bk->ql, bk->qr, k, sb->mom + sb->size, sb->cap);
            }
            sb->leaf[sb->size] = (Py_ssize_t)k;
            sb->size++;
        }
    }
    /* per leaf: the reduceat of its whole entries (0.0 if none), plus that of
     * its sub-pieces when it has any; added to the leaf's running total */
    const Py_ssize_t *wleaf = bk->wleaf;
    Py_ssize_t i = 0, e = 0;
    while (i < count || e < sb->size) {
        Py_ssize_t leaf;
        if (i < count && e < sb->size) {
            leaf = wleaf[i] < sb->leaf[e] ? wleaf[i] : sb->leaf[e];
        } else {
            leaf = i < count ? wleaf[i] : sb->leaf[e];
        }
        Py_ssize_t i1 = i, e1 = e;
        while (i1 < count && wleaf[i1] == leaf) {
            i1++;
        }
        while (e1 < sb->size && sb->leaf[e1] == leaf) {
            e1++;
        }
        for (int k = 0; k < terms; k++) {
            double sum = i1 > i ? segment_sum(bk->whole + (Py_ssize_t)k * count + i, i1 - i, 1)
                                : 0.0;
            if (e1 > e) {
                sum = sum + segment_sum(sb->mom + (Py_ssize_t)k * sb->cap + e, e1 - e, 1);
            }
            double *slot = acc + (Py_ssize_t)k * acc_stride + base + leaf;
            *slot = *slot + sum;
        }
        i = i1;
        e = e1;
    }
    return 0;
}

PyDoc_STRVAR(leaf_sums_doc,
"leaf_sums(t, values, offsets, lo, scale, n_leaf, degree, block, x, w, acc, mean)\n"
"\n"
"Fill acc ((degree + 1) * n + 1, curves * n_leaf; zeros on entry) with each leaf's\n"
"moment sums and mean (curves, n) with each curve's sample mean (see forest.py).\n"
"t (P,), values (P, n), lo and scale (curves,): float64; offsets (curves + 1,): int64.\n"
"x, w: the Gauss-Legendre nodes and weights used when degree >= 2.");

/* A call's scratch: the block's rows and pieces, and the Gauss-Legendre work. */
typedef struct {
    double *u, *cols;  /* rows of a block: leaf units; centred values, column-major */
    double *frac, *wq, *power, *s, *prod;
    Block bk;
} Scratch;

static void scratch_free(Scratch *sc)
{
    void *blocks[] = {sc->u, sc->cols, sc->frac, sc->wq, sc->power, sc->s, sc->prod,
                      sc->bk.whole, sc->bk.leaf, sc->bk.h, sc->bk.smid, sc->bk.energy,
                      sc->bk.cross, sc->bk.wleaf, sc->bk.q0, sc->bk.q1, sc->bk.ql, sc->bk.qr,
                      sc->bk.sub.mom, sc->bk.sub.leaf};
    for (size_t k = 0; k < sizeof(blocks) / sizeof(blocks[0]); k++) {
        free(blocks[k]);
    }
}

/* Allocate the scratch for blocks of at most `block` pieces; 0 or -1. */
static int scratch_alloc(Scratch *sc, const Spec *sp, Py_ssize_t block)
{
    const size_t rows = (size_t)block + 1, n = (size_t)sp->n;
    const size_t nodes = sp->nodes > 0 ? (size_t)sp->nodes : 1;
    Block *bk = &sc->bk;
    sc->u = malloc(sizeof(double) * rows);
    sc->cols = malloc(sizeof(double) * rows * n);
    sc->frac = malloc(sizeof(double) * nodes);
    sc->wq = malloc(sizeof(double) * nodes * n);
    sc->power = malloc(sizeof(double) * nodes);
    sc->s = malloc(sizeof(double) * nodes);
    sc->prod = malloc(sizeof(double) * nodes);
    bk->whole = malloc(sizeof(double) * (size_t)sp->terms * rows);
    bk->leaf = malloc(sizeof(double) * rows);
    bk->h = malloc(sizeof(double) * rows);
    bk->smid = malloc(sizeof(double) * rows);
    bk->energy = malloc(sizeof(double) * rows);
    bk->cross = malloc(rows);
    bk->wleaf = malloc(sizeof(Py_ssize_t) * rows);
    bk->q0 = malloc(sizeof(double) * n);
    bk->q1 = malloc(sizeof(double) * n);
    bk->ql = malloc(sizeof(double) * n);
    bk->qr = malloc(sizeof(double) * n);
    if (!(sc->u && sc->cols && sc->frac && sc->wq && sc->power && sc->s && sc->prod &&
          bk->whole && bk->leaf && bk->h && bk->smid && bk->energy && bk->cross &&
          bk->wleaf && bk->q0 && bk->q1 && bk->ql && bk->qr)) {
        return -1;
    }
    return 0;
}

/* All curves; returns 0, -1 (out of memory) or -2 (a leaf outside its curve). */
static int all_curves(const Spec *sp, const double *t, const double *values,
                      const int64_t *offsets, Py_ssize_t curves, const double *lo,
                      const double *scale, Py_ssize_t block, double *acc,
                      Py_ssize_t acc_stride, double *mean, Scratch *sc)
{
    const int n = sp->n;
    const Py_ssize_t cstride = block + 1;
    for (Py_ssize_t c = 0; c < curves; c++) {
        const Py_ssize_t a = (Py_ssize_t)offsets[c], b = (Py_ssize_t)offsets[c + 1];
        for (int j = 0; j < n; j++) {
            mean[c * n + j] = segment_sum(values + a * n + j, b - a, n) / (double)(b - a);
        }
        /* a curve of more than `block` samples: blocks of `block` pieces from its start */
        const Py_ssize_t step = b - a > block ? block : b - a;
        for (Py_ssize_t p0 = a; p0 < b - 1; p0 += step) {
            const Py_ssize_t p1 = p0 + step < b - 1 ? p0 + step : b - 1;
            const double lo_c = lo[c], scale_c = scale[c];
            for (Py_ssize_t r = p0; r <= p1; r++) {  /* the rows of pieces [p0, p1) */
                double u = (t[r] - lo_c) * scale_c;
                sc->u[r - p0] = u > sp->n_leaf ? sp->n_leaf : u;  /* NaN stays NaN */
            }
            if (p0 == a) {
                sc->u[0] = 0.0;
            }
            if (p1 == b - 1) {
                sc->u[p1 - p0] = sp->n_leaf;
            }
            for (int j = 0; j < n; j++) {
                const double m = mean[c * n + j];
                double *col = sc->cols + j * cstride - p0;
                for (Py_ssize_t r = p0; r <= p1; r++) {
                    col[r] = values[r * n + j] - m;
                }
            }
            int rc = block_sums(sp, sc->u, sc->cols, cstride, p1 - p0, acc, acc_stride,
                                c * sp->leaves, &sc->bk);
            if (rc < 0) {
                return rc;
            }
        }
    }
    return 0;
}

static PyObject *leaf_sums(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[11];
    Py_ssize_t n_leaf, block;
    int degree;
    static const char *names[] = {"t", "values", "offsets", "lo", "scale", "x", "w", "acc",
                                  "mean"};
    if (!PyArg_ParseTuple(args, "OOOOOninOOOO", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4],
                          &n_leaf, &degree, &block, &obj[5], &obj[6], &obj[7], &obj[8])) {
        return NULL;
    }
    Py_buffer view[9];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 9; got++) {
        if (kernel_buffer(obj[got], &view[got], got >= 7,
                          strcmp(names[got], "offsets") == 0 ? 'q' : 'd', "leaf_sums",
                          names[got]) < 0) {
            goto done;
        }
    }
    const Py_ssize_t points = view[0].len / 8, curves = view[2].len / 8 - 1;
    if (view[1].ndim != 2 || view[1].shape[0] != points || view[7].ndim != 2 ||
        view[8].ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "leaf_sums: values, acc and mean must be 2-D");
        goto done;
    }
    const int n = (int)view[1].shape[1];
    const int terms = (degree + 1) * n + 1;
    const Py_ssize_t nodes = view[5].len / 8;
    if (n < 1 || degree < 0 || n_leaf < 1 || block < 1 || curves < 0 ||
        view[3].len / 8 != curves || view[4].len / 8 != curves ||
        view[6].len / 8 != nodes || (degree >= 2 && nodes < 1) ||
        view[7].shape[0] != terms || view[7].shape[1] != curves * n_leaf ||
        view[8].shape[0] != curves || view[8].shape[1] != n) {
        PyErr_SetString(PyExc_ValueError, "leaf_sums: inconsistent shapes");
        goto done;
    }
    const int64_t *offsets = view[2].buf;
    for (Py_ssize_t c = 0; c < curves; c++) {
        if (offsets[c] < 0 || offsets[c + 1] - offsets[c] < 1 || offsets[c + 1] > points) {
            PyErr_SetString(PyExc_ValueError, "leaf_sums: offsets are not curve boundaries");
            goto done;
        }
    }
    Spec sp = {.n = n, .degree = degree, .terms = terms, .n_leaf = (double)n_leaf,
               .leaves = n_leaf, .nodes = (int)nodes, .x = view[5].buf, .w = view[6].buf};
    Scratch sc = {0};
    int rc = -1;
    if (scratch_alloc(&sc, &sp, block) == 0) {
        for (Py_ssize_t k = 0; k < nodes; k++) {
            sc.frac[k] = 0.5 * (1.0 + sp.x[k]);
        }
        sp.frac = sc.frac;
        sp.wq = sc.wq;
        sp.power = sc.power;
        sp.s = sc.s;
        sp.prod = sc.prod;
        Py_BEGIN_ALLOW_THREADS
        rc = all_curves(&sp, view[0].buf, view[1].buf, offsets, curves, view[3].buf,
                        view[4].buf, block, view[7].buf, curves * n_leaf, view[8].buf, &sc);
        Py_END_ALLOW_THREADS
    }
    scratch_free(&sc);
    if (rc == -1) {
        PyErr_NoMemory();
    } else if (rc == -2) {
        PyErr_SetString(PyExc_ValueError,
                        "leaf_sums: a sample falls outside its curve's leaves (times must be "
                        "finite and non-decreasing within a curve, each curve of positive width)");
    } else {
        result = Py_NewRef(Py_None);
    }
done:
    for (int k = 0; k < got; k++) {
        PyBuffer_Release(&view[k]);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"leaf_sums", leaf_sums, METH_VARARGS, leaf_sums_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_forest",
    "Leaf sums of the dyadic moment forest in one pass (see _forest.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__forest(void)
{
    return PyModule_Create(&module);
}
