/* The package's reading of an unsigned 64-bit number from Python: any integer, including
 * NumPy's and torch's scalars (anything with __index__, as offsets computed with NumPy are),
 * and a negative or too large one refused with hmr.InvalidArgumentError and the bounds, not
 * wrapped round (PyArg's "K" wraps -1 to 2**64 - 1) nor an OverflowError. */
#include "hmr_py.h"

int hmr_py_unsigned(const char *what, const char *name, PyObject *value, unsigned long long *out)
{
	PyObject *integer;
	if (PyLong_CheckExact(value)) { /* the common case: no new object */
		Py_INCREF(value);
		integer = value;
	} else {
		integer = PyNumber_Index(value); /* TypeError for what is no integer */
		if (!integer)
			return -1;
	}
	*out = PyLong_AsUnsignedLongLong(integer);
	Py_DECREF(integer);
	if (!(*out == (unsigned long long)-1 && PyErr_Occurred()))
		return 0;
	if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* negative, or over 64 bits */
		PyErr_Clear();
		hmr_py_raise_code(HMR_EINVAL, what, "%s runs from 0 to 2**64 - 1", name);
	}
	return -1;
}
