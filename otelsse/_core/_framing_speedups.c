/* The framers' hot paths, compiled: a read that is exactly one simple SSE event, or exactly one
 * whole AWS event-stream frame.
 *
 * simple_event(data: bytes) -> (event type, data, decoded characters) | None
 * whole_frame(data: bytes) -> (header block, payload text) | None
 *
 * `data` is a read that holds one whole event and nothing else, already LF-normalised (no CR):
 * "data: VALUE\n\n" or "event: NAME\ndata: VALUE\n\n", VALUE and NAME without LF, both strict
 * UTF-8. Anything else, including invalid UTF-8, is None: the pure-Python parser
 * (framing.py) then reads it, and it stays the definition; this answers exactly what its own
 * fast path answers for the reads it takes. Optional: framing.py works without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *MESSAGE;

static PyObject *
decode_strict(const char *start, Py_ssize_t size)
{
    PyObject *text = PyUnicode_DecodeUTF8(start, size, "strict");
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear(); /* not ours to judge: None, and framing.py counts it */
    }
    return text;
}

static PyObject *
simple_event(PyObject *module, PyObject *arg)
{
    (void)module;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "simple_event() takes bytes");
        return NULL;
    }
    const char *data = PyBytes_AS_STRING(arg);
    Py_ssize_t size = PyBytes_GET_SIZE(arg);
    if (size < 8 || data[size - 1] != '\n' || data[size - 2] != '\n') {
        Py_RETURN_NONE;
    }
    const char *end = data + size - 2; /* the value ends here */
    const char *name = NULL, *value;
    Py_ssize_t name_size = 0;
    if (memcmp(data, "data: ", 6) == 0) {
        value = data + 6;
    }
    else if (size >= 16 && memcmp(data, "event: ", 7) == 0) {
        name = data + 7;
        const char *lf = memchr(name, '\n', end - name);
        if (lf == NULL || end - lf < 7 || memcmp(lf, "\ndata: ", 7) != 0) {
            Py_RETURN_NONE;
        }
        name_size = lf - name;
        value = lf + 7;
    }
    else {
        Py_RETURN_NONE;
    }
    if (memchr(value, '\n', end - value) != NULL) {
        Py_RETURN_NONE;
    }
    PyObject *value_text = decode_strict(value, end - value);
    if (value_text == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    /* The framing around NAME and VALUE is ASCII: one character per byte. */
    Py_ssize_t chars = (value - data) - name_size + PyUnicode_GET_LENGTH(value_text) + 2;
    PyObject *name_text;
    if (name_size == 0) {
        name_text = Py_NewRef(MESSAGE);
    }
    else {
        name_text = decode_strict(name, name_size);
        if (name_text == NULL) {
            Py_DECREF(value_text);
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        chars += PyUnicode_GET_LENGTH(name_text);
    }
    PyObject *result = Py_BuildValue("(NNn)", name_text, value_text, chars);
    return result;
}

/* whole_frame: `data` is one frame and nothing else (its total length is len(data)), both CRCs
 * match, its lengths are within the format's maxima and its payload is strict UTF-8: its header
 * block (bytes) and its payload (str). Anything else is None, and eventstream.py's parser, the
 * definition, reads it. The CRC is CRC-32 (ISO-HDLC, as zlib.crc32), big-endian integers (AWS,
 * "Event stream encoding"). */

#define PRELUDE 12
#define SMALLEST_FRAME 16
#define MAX_HEADERS_BYTES (128 * 1024)
#define MAX_PAYLOAD_BYTES (24 * 1024 * 1024)

static uint32_t CRC_TABLE[256];

static void
crc_table_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        CRC_TABLE[n] = c;
    }
}

static uint32_t
crc32_of(const unsigned char *data, Py_ssize_t size)
{
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < size; i++) {
        c = CRC_TABLE[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

static uint32_t
be32(const unsigned char *at)
{
    return (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 | (uint32_t)at[2] << 8 | at[3];
}

static PyObject *
whole_frame(PyObject *module, PyObject *arg)
{
    (void)module;
    if (!PyBytes_Check(arg)) {
        Py_RETURN_NONE; /* a bytearray or a view: the parser reads it */
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t size = PyBytes_GET_SIZE(arg);
    if (size < SMALLEST_FRAME || (Py_ssize_t)be32(data) != size) {
        Py_RETURN_NONE;
    }
    Py_ssize_t headers = (Py_ssize_t)be32(data + 4);
    Py_ssize_t payload = size - headers - SMALLEST_FRAME;
    if (headers > MAX_HEADERS_BYTES || payload < 0 || payload > MAX_PAYLOAD_BYTES) {
        Py_RETURN_NONE;
    }
    if (crc32_of(data, 8) != be32(data + 8) || crc32_of(data, size - 4) != be32(data + size - 4)) {
        Py_RETURN_NONE;
    }
    PyObject *text = decode_strict((const char *)data + PRELUDE + headers, payload);
    if (text == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *block = PyBytes_FromStringAndSize((const char *)data + PRELUDE, headers);
    if (block == NULL) {
        Py_DECREF(text);
        return NULL;
    }
    return Py_BuildValue("(NN)", block, text);
}

static PyMethodDef methods[] = {
    {"simple_event", simple_event, METH_O,
     "simple_event(data) -> (event type, data, decoded characters) | None"},
    {"whole_frame", whole_frame, METH_O,
     "whole_frame(data) -> (header block, payload text) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_framing_speedups",
    "The framers' hot paths, compiled (optional).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__framing_speedups(void)
{
    crc_table_init();
    MESSAGE = PyUnicode_InternFromString("message");
    if (MESSAGE == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
