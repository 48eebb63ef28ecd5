/* The module hmr._hmr: constants from hmr.h, the library's version, hmr.query, and the types
 * (domain.c, region.c, remote_key.c, endpoint.c).  The Python-level classes it raises and
 * returns (hmr.Error and subclasses, hmr.Pointer, hmr.MemoryInfo) live in the package's
 * Python files, imported here once. */
#include <limits.h>
#include <string.h>

#include "hmr_py.h"

#include <pthread.h>
#include <unistd.h>

HmrPyState hmr_py;

int hmr_py_add_type(PyObject *module, PyType_Spec *spec, const char *name, PyTypeObject **type)
{
	*type = (PyTypeObject *)PyType_FromSpec(spec);
	if (!*type)
		return -1;
	/* The module holds a reference of its own (AddObjectRef does not steal ours, so a failure
	 * leaks nothing); ours stays in hmr_py for the life of the process. */
	return PyModule_AddObjectRef(module, name, (PyObject *)*type);
}

PyObject *hmr_py_enter_self(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *module_query(PyObject *module, PyObject *obj)
{
	(void)module;
	if (hmr_py_main_interpreter_only("hmr.query") != 0)
		return NULL;
	HmrPySource source;
	if (hmr_py_source_get(obj, 0, &source) != 0)
		return NULL;
	struct hmr_mem_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.dmabuf_fd = -1;
	int rc;
	Py_BEGIN_ALLOW_THREADS /* may ask a device runtime */
	rc = hmr_mem_query(source.address, source.length, &attr);
	Py_END_ALLOW_THREADS
	hmr_py_source_release(&source);
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_mem_query");
	return PyObject_CallFunction(hmr_py.memory_info_type, "ssKKKK",
				     hmr_py_iface_name(attr.iface), hmr_py_kind_name(attr.kind),
				     (unsigned long long)attr.device,
				     (unsigned long long)(uintptr_t)attr.base,
				     (unsigned long long)attr.alloc_len,
				     (unsigned long long)attr.alloc_id);
}

static PyObject *module_strerror(PyObject *module, PyObject *code)
{
	(void)module;
	int overflow = 0;
	long value = PyLong_AsLongAndOverflow(code, &overflow);
	if (value == -1 && PyErr_Occurred())
		return NULL;
	if (overflow || value > INT_MAX || value < -INT_MAX)
		return PyUnicode_FromString("unknown error"); /* no HMR_E* code is that large */
	return PyUnicode_FromString(hmr_strerror((int)value));
}

static PyMethodDef module_methods[] = {
	{"query", module_query, METH_O,
	 "query(obj)\n--\n\nWhat obj's memory is (hmr_mem_query): a MemoryInfo with iface, kind,\n"
	 "device, base, alloc_len and alloc_id."},
	{"strerror", module_strerror, METH_O,
	 "strerror(code)\n--\n\nhmr's short description of an HMR_E* code."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "hmr._hmr",
	.m_doc = "hmr's C ABI for Python (see the package hmr).",
	.m_size = -1,
	.m_methods = module_methods,
};

static int add_constants(PyObject *module)
{
#define C(name, value) {name, (unsigned long long)(value)}
	static const struct {
		const char *name;
		unsigned long long value;
	} constants[] = {
		C("READ", HMR_READ), C("WRITE", HMR_WRITE), C("REMOTE_READ", HMR_REMOTE_READ),
		C("REMOTE_WRITE", HMR_REMOTE_WRITE), C("SEND", HMR_SEND), C("RECV", HMR_RECV),
		C("COLLECTIVE", HMR_COLLECTIVE),
		C("SYNC_TO_DEVICE", HMR_SYNC_TO_DEVICE), C("SYNC_FROM_DEVICE", HMR_SYNC_FROM_DEVICE),
		C("MR_UNSPEC", HMR_MR_UNSPEC), C("MR_BASIC", HMR_MR_BASIC),
		C("MR_SCALABLE", HMR_MR_SCALABLE), C("MR_LOCAL", HMR_MR_LOCAL),
		C("MR_RAW", HMR_MR_RAW), C("MR_VIRT_ADDR", HMR_MR_VIRT_ADDR),
		C("MR_ALLOCATED", HMR_MR_ALLOCATED), C("MR_PROV_KEY", HMR_MR_PROV_KEY),
		C("MR_MMU_NOTIFY", HMR_MR_MMU_NOTIFY), C("MR_RMA_EVENT", HMR_MR_RMA_EVENT),
		C("MR_ENDPOINT", HMR_MR_ENDPOINT), C("MR_HMEM", HMR_MR_HMEM),
		C("MR_COLLECTIVE", HMR_MR_COLLECTIVE), C("KEY_NOTAVAIL", HMR_KEY_NOTAVAIL),
	};
#undef C
	for (size_t i = 0; i < sizeof constants / sizeof constants[0]; ++i) {
		PyObject *value = PyLong_FromUnsignedLongLong(constants[i].value);
		if (!value || PyModule_AddObject(module, constants[i].name, value) != 0) {
			Py_XDECREF(value);
			return -1;
		}
	}
	uint32_t version = hmr_version();
	PyObject *text = PyUnicode_FromFormat("%u.%u.%u", (unsigned)(version >> 16),
					      (unsigned)((version >> 8) & 0xff),
					      (unsigned)(version & 0xff));
	if (!text || PyModule_AddObject(module, "__version__", text) != 0) {
		Py_XDECREF(text);
		return -1;
	}
	return 0;
}

static PyObject *import_attr(const char *module_name, const char *name)
{
	PyObject *module = PyImport_ImportModule(module_name);
	if (!module)
		return NULL;
	PyObject *attr = PyObject_GetAttrString(module, name);
	Py_DECREF(module);
	return attr;
}

static int intern(PyObject **slot, const char *text)
{
	*slot = PyUnicode_InternFromString(text);
	return *slot ? 0 : -1;
}

static int init_state(void)
{
	if (intern(&hmr_py.s_access, "access") || intern(&hmr_py.s_offset, "offset") ||
	    intern(&hmr_py.s_length, "length") || intern(&hmr_py.s_dlpack, "__dlpack__") ||
	    intern(&hmr_py.s_cuda_array_interface, "__cuda_array_interface__") ||
	    intern(&hmr_py.s_data_ptr, "data_ptr") || intern(&hmr_py.s_nbytes, "nbytes") ||
	    intern(&hmr_py.s_numel, "numel") || intern(&hmr_py.s_element_size, "element_size") ||
	    intern(&hmr_py.s_is_contiguous, "is_contiguous") ||
	    intern(&hmr_py.s_is_conj, "is_conj") || intern(&hmr_py.s_is_neg, "is_neg") ||
	    intern(&hmr_py.s_address, "address") || intern(&hmr_py.s_keepalive, "keepalive") ||
	    intern(&hmr_py.s_torch, "torch") || intern(&hmr_py.s_tensor, "Tensor"))
		return -1;
	hmr_py.error = import_attr("hmr._errors", "Error");
	hmr_py.error_for_code = import_attr("hmr._errors", "_BY_CODE");
	hmr_py.closed_error = import_attr("hmr._errors", "ClosedError");
	hmr_py.pointer_type = import_attr("hmr._types", "Pointer");
	hmr_py.memory_info_type = import_attr("hmr._types", "MemoryInfo");
	hmr_py.cuda_array_interface = import_attr("hmr._sources", "cuda_array_interface");
	if (!hmr_py.error || !hmr_py.error_for_code || !hmr_py.closed_error ||
	    !hmr_py.pointer_type || !hmr_py.memory_info_type || !hmr_py.cuda_array_interface)
		return -1;
	return 0;
}

static void note_forked_child(void) { hmr_py_this_process = getpid(); }

int hmr_py_main_interpreter_only(const char *what)
{
	if (PyInterpreterState_GetID(PyInterpreterState_Get()) == 0)
		return 0;
	PyErr_Format(PyExc_ImportError,
		     "%s: hmr serves the main interpreter only (its state is process-wide), "
		     "not a subinterpreter",
		     what);
	return -1;
}

PyMODINIT_FUNC PyInit__hmr(void)
{
	if (!hmr_py_this_process) {
		hmr_py_this_process = getpid();
		if (pthread_atfork(NULL, NULL, note_forked_child) != 0) {
			PyErr_SetString(PyExc_MemoryError, "pthread_atfork failed");
			return NULL;
		}
	}
	/* Module state is process-wide (m_size -1): one hmr per process, for the main
	 * interpreter.  CPython 3.11 lets a subinterpreter import such a module (it copies the
	 * first import's dict, sharing its types and exception classes, so `except hmr.Error`
	 * there would not catch hmr's errors): entering from one is refused here and in every
	 * entry point that makes an object (Domain, query). */
	if (hmr_py_main_interpreter_only("import hmr") != 0)
		return NULL;
	if (!hmr_py.error && init_state() != 0)
		return NULL;
	PyObject *module = PyModule_Create(&module_def);
	if (!module)
		return NULL;
	if (add_constants(module) || hmr_py_domain_init_type(module) ||
	    hmr_py_region_init_type(module) || hmr_py_remote_key_init_type(module) ||
	    hmr_py_endpoint_init_type(module)) {
		Py_DECREF(module);
		return NULL;
	}
	return module;
}
