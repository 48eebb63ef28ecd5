/* hmr.Error from hmr's return codes: the class comes from hmr/_errors.py (subclasses by code),
 * .code is the positive HMR_E* number, .reason hmr_last_error()'s text for this thread. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hmr_py.h"

static PyObject *raise_with(int code, const char *what, const char *reason)
{
	PyObject *cls = NULL;
	if (hmr_py.error_for_code) {
		PyObject *key = PyLong_FromLong(code);
		if (!key)
			return NULL;
		cls = PyDict_GetItemWithError(hmr_py.error_for_code, key); /* borrowed */
		Py_DECREF(key);
		if (!cls && PyErr_Occurred())
			return NULL;
	}
	if (!cls)
		cls = hmr_py.error;
	/* A reason cut to its buffer may end inside a UTF-8 character: it is decoded leniently,
	 * so the caller gets hmr.Error and not UnicodeDecodeError. */
	PyObject *text = PyUnicode_DecodeUTF8(reason, (Py_ssize_t)strlen(reason), "replace");
	if (!text)
		return NULL;
	PyObject *message = reason[0] ? PyUnicode_FromFormat("%s: %s (%U)", what, hmr_strerror(code), text)
				      : PyUnicode_FromFormat("%s: %s (no reason given)", what,
							     hmr_strerror(code));
	if (!message) {
		Py_DECREF(text);
		return NULL;
	}
	PyObject *error = PyObject_CallFunction(cls, "iOO", code, text, message);
	Py_DECREF(text);
	Py_DECREF(message);
	if (!error)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(error), error);
	Py_DECREF(error);
	return NULL;
}

PyObject *hmr_py_raise(int rc, const char *what)
{
	return raise_with(rc < 0 ? -rc : rc, what, hmr_last_error());
}

PyObject *hmr_py_raise_code(int code, const char *what, const char *format, ...)
{
	char reason[512];
	va_list args;
	va_start(args, format);
	vsnprintf(reason, sizeof reason, format, args);
	va_end(args);
	return raise_with(code, what, reason);
}

PyObject *hmr_py_raise_from_current(int code, const char *what, const char *context)
{
	PyObject *type, *value, *trace;
	PyErr_Fetch(&type, &value, &trace);
	PyErr_NormalizeException(&type, &value, &trace);
	if (trace && value)
		PyException_SetTraceback(value, trace);
	/* "<type name>: <str(error)>", through the limited API */
	PyObject *name = type ? PyObject_GetAttrString(type, "__name__") : NULL;
	PyObject *text = value ? PyUnicode_FromFormat("%S: %S", name ? name : Py_None, value) : NULL;
	const char *message = text ? PyUnicode_AsUTF8AndSize(text, NULL) : NULL;
	if (!message)
		PyErr_Clear();
	hmr_py_raise_code(code, what, "%s: %s", context, message ? message : "(no message)");
	Py_XDECREF(name);
	Py_XDECREF(text);
	if (value) {
		PyObject *raised_type, *raised, *raised_trace;
		PyErr_Fetch(&raised_type, &raised, &raised_trace);
		PyErr_NormalizeException(&raised_type, &raised, &raised_trace);
		if (raised)
			PyException_SetCause(raised, value); /* steals value */
		else
			Py_DECREF(value);
		PyErr_Restore(raised_type, raised, raised_trace);
	}
	Py_XDECREF(type);
	Py_XDECREF(trace);
	return NULL;
}

PyObject *hmr_py_raise_closed(const char *what)
{
	return hmr_py_raise_code(HMR_EBADF, what, "the object is closed");
}

PyObject *hmr_py_raise_domain_closing(const char *what)
{
	return hmr_py_raise_code(HMR_EBADF, what,
				 "its domain is being closed (Domain.close is closing its regions, "
				 "keys and endpoints)");
}

pid_t hmr_py_this_process;

PyObject *hmr_py_raise_inherited(const char *what)
{
	return hmr_py_raise_code(HMR_EBADF, what,
				 "this object is the parent process's, made before fork(): a forked "
				 "child cannot use it (it may close it); open a Domain in this process");
}

const char *hmr_py_iface_name(int iface)
{
	static const char *const names[HMR_HMEM_IFACE_COUNT] = {"system", "cuda", "rocr", "ze",
								 "neuron", "synapseai"};
	return iface >= 0 && iface < HMR_HMEM_IFACE_COUNT ? names[iface] : "unknown";
}

const char *hmr_py_kind_name(int kind)
{
	static const char *const names[] = {"host", "host_alloc", "device_only", "managed"};
	return kind >= 0 && kind < 4 ? names[kind] : "unknown";
}
