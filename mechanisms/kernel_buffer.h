/*
 * The one buffer check of privpipe's C kernels (setup.py builds each with this
 * directory on its include path).
 *
 * A kernel takes numpy arrays through the buffer protocol (no numpy headers):
 * each must be C-contiguous, of the item the kernel reads (`want`: 'd' float64,
 * 'q' int64, 'I' uint32, native little-endian), and writable when the kernel
 * writes it. Anything else is a TypeError (or the protocol's own BufferError)
 * naming the kernel and the argument, before any arithmetic.
 */
#ifndef PRIVPIPE_KERNEL_BUFFER_H
#define PRIVPIPE_KERNEL_BUFFER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static int kernel_buffer(PyObject *obj, Py_buffer *view, int writable, char want,
                         const char *kernel, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        return -1;
    }
    const char *fmt = view->format ? view->format : "B";
    const char *code = (fmt[0] == '<' || fmt[0] == '=') ? fmt + 1 : fmt;
    int ok;
    if (want == 'd') {
        ok = view->itemsize == 8 && strcmp(code, "d") == 0;
    } else if (want == 'q') {
        ok = view->itemsize == 8 && (strcmp(code, "q") == 0 || strcmp(code, "l") == 0);
    } else {
        ok = view->itemsize == 4 && strcmp(code, "I") == 0;
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: %s has the wrong dtype (%s)", kernel, name, fmt);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#endif
