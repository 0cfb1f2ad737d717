/* The framing parser's hot path, compiled: a read that is exactly one simple event.
 *
 * simple_event(data: bytes) -> (event type, data, decoded characters) | None
 *
 * `data` is a read that holds one whole event and nothing else, already LF-normalised (no CR):
 * "data: VALUE\n\n" or "event: NAME\ndata: VALUE\n\n", VALUE and NAME without LF, both strict
 * UTF-8. Anything else, including invalid UTF-8, is None: the pure-Python parser
 * (framing.py) then reads it, and it stays the definition; this answers exactly what its own
 * fast path answers for the reads it takes. Optional: framing.py works without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

static PyMethodDef methods[] = {
    {"simple_event", simple_event, METH_O,
     "simple_event(data) -> (event type, data, decoded characters) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_framing_speedups",
    "The framing parser's hot path, compiled (optional).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__framing_speedups(void)
{
    MESSAGE = PyUnicode_InternFromString("message");
    if (MESSAGE == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
