/*
 * Uniforms of a chunk of stream segments from their ChaCha20 keystreams, in one call.
 *
 * tasks/stream_draw.py draws each output segment of a (user, stream) from its
 * own ChaCha20 keystream (key = the segment's 256-bit HMAC key,
 * tasks.continuation.stream_key; 20 rounds; 64-bit block counter and 64-bit
 * nonce starting at 0) through randomgen's ChaCha bit generator and numpy's
 * Generator.random: uniform k of a segment is
 *
 *     (w[2k] | w[2k + 1] << 32) >> 11, times 2^-53,
 *
 * w the keystream's 32-bit little-endian words in order (randomgen 2.5.1,
 * src/chacha/chacha.h: chacha_next32 / chacha_next64 / chacha_next_double;
 * the state words are the constants, the key's eight little-endian words, the
 * block counter's two words, then the nonce's two). A segment of rows lo..hi
 * takes `rows` rows of uniforms: its first hi - lo uniforms fill row 0 of
 * u[:, lo:hi], the next hi - lo row 1, and so on (one Generator.random(out=...)
 * call per row in the Python loop this replaces).
 *
 * This module computes the same doubles, bit for bit (the Python loop is kept
 * as the tests' reference: tests/tasks/test_keystream_kernel.py compares both
 * on random keys and segments; tests/privacy/test_golden_draws.py pins a
 * release's draws), eight blocks at a time so that the compiler vectorises
 * the rounds across blocks (-O3). Integer arithmetic only, and the final
 * conversion is exact (a 53-bit integer times a power of two).
 *
 * No Python object is touched between Py_BEGIN_ALLOW_THREADS and
 * Py_END_ALLOW_THREADS: a chunk's keystreams are computed without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "kernel_buffer.h"

#define LANES 8  /* blocks computed at once, one per lane of a vector */

/* LANES 32-bit words: GCC and Clang vector extensions (SSE2 pairs, or AVX2 below). */
typedef uint32_t lanes_t __attribute__((vector_size(4 * LANES)));

#define ROTL(v, n) (((v) << (n)) | ((v) >> (32 - (n))))
#define QR(a, b, c, d)                                      \
    x[a] += x[b]; x[d] ^= x[a]; x[d] = ROTL(x[d], 16);      \
    x[c] += x[d]; x[b] ^= x[c]; x[b] = ROTL(x[b], 12);      \
    x[a] += x[b]; x[d] ^= x[a]; x[d] = ROTL(x[d], 8);       \
    x[c] += x[d]; x[b] ^= x[c]; x[b] = ROTL(x[b], 7);

/* On x86-64 the block function is built twice (AVX2 and the baseline, SSE2) and the
 * loader picks the one the machine runs: the same integer arithmetic either way. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define BEST_TARGET __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef BEST_TARGET
#define BEST_TARGET
#endif

/* Keystream blocks counter .. counter + LANES - 1 of `key`: out[l][i] is word i of block l. */
BEST_TARGET
static void chacha20_blocks(const uint32_t key[8], uint64_t counter, uint32_t out[LANES][16])
{
    static const uint32_t sigma[4] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u};
    lanes_t in[16], x[16];
    for (int i = 0; i < 4; i++) in[i] = (lanes_t){0} + sigma[i];
    for (int i = 0; i < 8; i++) in[4 + i] = (lanes_t){0} + key[i];
    for (int l = 0; l < LANES; l++) {
        uint64_t c = counter + (uint64_t)l;
        in[12][l] = (uint32_t)c;
        in[13][l] = (uint32_t)(c >> 32);
    }
    in[14] = in[15] = (lanes_t){0};
    memcpy(x, in, sizeof x);
    for (int r = 0; r < 20; r += 2) {
        QR(0, 4, 8, 12) QR(1, 5, 9, 13) QR(2, 6, 10, 14) QR(3, 7, 11, 15)
        QR(0, 5, 10, 15) QR(1, 6, 11, 12) QR(2, 7, 8, 13) QR(3, 4, 9, 14)
    }
    for (int i = 0; i < 16; i++) {
        x[i] += in[i];
        for (int l = 0; l < LANES; l++) out[l][i] = x[i][l];
    }
}

/* Fill u[r * cols + lo .. hi) for r < rows from one segment's keystream. */
static void fill_segment(const uint32_t key[8], int64_t lo, int64_t hi, Py_ssize_t rows,
                         Py_ssize_t cols, double *u)
{
    uint32_t block[LANES][16];
    const uint32_t *words = &block[0][0];
    uint64_t counter = 0;
    int used = LANES * 8;  /* uniforms taken from `block` (eight per 64-byte block) */
    for (Py_ssize_t r = 0; r < rows; r++) {
        double *row = u + r * cols;
        for (int64_t i = lo; i < hi; i++) {
            if (used == LANES * 8) {
                chacha20_blocks(key, counter, block);
                counter += LANES;
                used = 0;
            }
            uint64_t v = (uint64_t)words[2 * used] | ((uint64_t)words[2 * used + 1] << 32);
            row[i] = (double)(v >> 11) * (1.0 / 9007199254740992.0);
            used++;
        }
    }
}

PyDoc_STRVAR(fill_uniforms_doc,
"fill_uniforms(keys, bounds, u)\n"
"\n"
"Fill u (rows, P; float64) with each segment's ChaCha20 uniforms (see _keystream.c):\n"
"keys (G, 8) uint32, each segment's key as its eight little-endian words; bounds (G, 2)\n"
"int64, each segment's columns [lo, hi) of u (0 <= lo <= hi <= P).");

static PyObject *fill_uniforms(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[3];
    if (!PyArg_ParseTuple(args, "OOO", &obj[0], &obj[1], &obj[2])) {
        return NULL;
    }
    static const char want[] = "Iqd", *names[] = {"keys", "bounds", "u"};
    Py_buffer view[3];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 3; got++) {
        if (kernel_buffer(obj[got], &view[got], got == 2, want[got], "fill_uniforms",
                          names[got]) < 0) {
            goto done;
        }
    }
    if (view[0].ndim != 2 || view[0].shape[1] != 8 || view[1].ndim != 2 ||
        view[1].shape[1] != 2 || view[1].shape[0] != view[0].shape[0] || view[2].ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "fill_uniforms: inconsistent shapes");
        goto done;
    }
    const Py_ssize_t segments = view[0].shape[0], rows = view[2].shape[0],
                     cols = view[2].shape[1];
    const int64_t *bounds = view[1].buf;
    for (Py_ssize_t g = 0; g < segments; g++) {
        if (bounds[2 * g] < 0 || bounds[2 * g] > bounds[2 * g + 1] || bounds[2 * g + 1] > cols) {
            PyErr_SetString(PyExc_ValueError, "fill_uniforms: a segment's bounds are not columns "
                            "of u");
            goto done;
        }
    }
    const uint32_t *keys = view[0].buf;
    double *u = view[2].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < segments; g++) {
        fill_segment(keys + 8 * g, bounds[2 * g], bounds[2 * g + 1], rows, cols, u);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < got; k++) {
        PyBuffer_Release(&view[k]);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"fill_uniforms", fill_uniforms, METH_VARARGS, fill_uniforms_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_keystream",
    "Uniforms of stream segments from their ChaCha20 keystreams (see _keystream.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__keystream(void)
{
    return PyModule_Create(&module);
}
