/* Where a Python object's memory is, and what keeps it valid while it is registered.  Tried in
 * order of cost: hmr.Pointer, the buffer protocol (bytearray, memoryview, mmap, array, NumPy),
 * torch tensors by data_ptr (torch exports no buffer and its __dlpack__ costs ~0.8 µs),
 * __dlpack__ (CuPy, JAX, torch where data_ptr does not do), __cuda_array_interface__. */
#include <string.h>

#include "hmr_py.h"

/* What an error about the object says it was about: register, query and the endpoint's
 * write and read all read an object's memory here. */
static const char kWhat[] = "hmr (the object's memory)";

static int no_memory(PyObject *obj)
{
	PyObject *name = PyType_GetName(Py_TYPE(obj));
	const char *text = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
	if (!text) {
		PyErr_Clear();
		text = "?";
	}
	hmr_py_raise_code(HMR_EINVAL, kWhat,
			  "a %s object exposes no memory: give a buffer-protocol object, a DLPack "
			  "producer (__dlpack__), a __cuda_array_interface__ object or hmr.Pointer",
			  text);
	Py_XDECREF(name);
	return -1;
}

/* Diagnoses a failed contiguous export: read-only, or not contiguous. */
static int buffer_refused(PyObject *obj, int write)
{
	PyObject *type, *value, *trace;
	PyErr_Fetch(&type, &value, &trace);
	Py_buffer view;
	int code = 0;
	const char *why = NULL;
	if (PyObject_GetBuffer(obj, &view, PyBUF_ANY_CONTIGUOUS) == 0) {
		PyBuffer_Release(&view);
		code = write ? HMR_EACCES : HMR_EINVAL;
		why = write ? "the buffer is read-only and the access lets the NIC write it (READ, RECV or "
			      "REMOTE_WRITE)"
			    : "the object refused its buffer, then gave it when asked again (an "
			      "exporter that changes its mind cannot be registered)";
	} else {
		PyErr_Clear();
		if (PyObject_GetBuffer(obj, &view, PyBUF_FULL_RO) == 0) {
			PyBuffer_Release(&view);
			code = HMR_EINVAL;
			why = "the buffer is not contiguous: one registration covers one range of "
			      "memory (register a contiguous copy, or each contiguous part)";
		} else {
			PyErr_Clear();
		}
	}
	if (!why) {
		PyErr_Restore(type, value, trace); /* the exporter's own error says it best */
		return -1;
	}
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(trace);
	hmr_py_raise_code(code, kWhat, "%s", why);
	return -1;
}

static int from_buffer(PyObject *obj, int write, HmrPySource *source)
{
	/* PyBUF_SIMPLE is the cheapest export (NumPy builds no shape or format for it) and any
	 * C-contiguous exporter gives it; Fortran-ordered ones need the ANY_CONTIGUOUS request. */
	int flags = write ? PyBUF_WRITABLE : PyBUF_SIMPLE;
	if (PyObject_GetBuffer(obj, &source->view, flags) != 0) {
		PyErr_Clear();
		if (PyObject_GetBuffer(obj, &source->view, flags | PyBUF_ANY_CONTIGUOUS) != 0)
			return buffer_refused(obj, write);
	}
	source->kind = HMR_PY_SOURCE_BUFFER;
	source->address = source->view.buf;
	source->length = (size_t)source->view.len;
	source->readonly = source->view.readonly;
	return 0;
}

/* A dense layout: every element once, no gaps, whatever the order of the dimensions. */
static int dlpack_dense(const DLTensor *t)
{
	if (!t->strides)
		return 1;
	int64_t order[64];
	int n = 0;
	for (int i = 0; i < t->ndim; ++i) {
		if (t->shape[i] == 0)
			return 1; /* empty: nothing to lay out */
		if (t->shape[i] == 1)
			continue;
		if (t->strides[i] <= 0 || n == 64)
			return 0;
		int j = n++;
		while (j > 0 && t->strides[order[j - 1]] > t->strides[i]) {
			order[j] = order[j - 1];
			--j;
		}
		order[j] = i;
	}
	int64_t expected = 1;
	for (int k = 0; k < n; ++k) {
		if (t->strides[order[k]] != expected)
			return 0;
		/* (A shape whose elements overflow 64 bits is no memory at all.) */
		if (__builtin_mul_overflow(expected, t->shape[order[k]], &expected))
			return 0;
	}
	return 1;
}

/* The bytes a DLPack tensor's elements take (sub-byte types packed, as DLPack 1.1 lays out its
 * 4- and 6-bit floats), or what makes it have no size (a reason). */
static const char *dlpack_bytes(const DLTensor *t, size_t *out)
{
	if (t->ndim < 0)
		return "a negative number of dimensions";
	size_t elements = 1;
	for (int i = 0; i < t->ndim; ++i) {
		if (t->shape[i] < 0)
			return "a negative dimension";
		if (__builtin_mul_overflow(elements, (size_t)t->shape[i], &elements))
			return "more elements than an address space holds";
	}
	size_t bits = (size_t)t->dtype.bits * t->dtype.lanes; /* (16 bits times 16 bits) */
	if (bits == 0)
		return "elements of 0 bits";
	if (__builtin_mul_overflow(elements, bits, &bits))
		return "more bytes than an address space holds";
	*out = bits / 8 + (bits % 8 != 0);
	return NULL;
}

/* Calls the producer's deleter of a consumed DLPack tensor, of either version. */
static void dlpack_delete(HmrPySource *source)
{
	if (source->dl && source->dl->deleter)
		source->dl->deleter(source->dl);
	if (source->dl_versioned && source->dl_versioned->deleter)
		source->dl_versioned->deleter(source->dl_versioned);
	source->dl = NULL;
	source->dl_versioned = NULL;
}

/* obj.__dlpack__(max_version=(1, 0)): DLPack 1.0's versioned capsule says whether the memory
 * is read-only (an immutable JAX array must not be registered for the NIC to write).  A
 * producer that predates it refuses the keyword (TypeError, as the array API has consumers
 * expect) and is asked again without it. */
static PyObject *call_dlpack(PyObject *method)
{
	PyObject *kwargs = Py_BuildValue("{s:(ii)}", "max_version", 1, 0);
	if (!kwargs)
		return NULL;
	PyObject *no_args = PyTuple_New(0);
	PyObject *capsule = no_args ? PyObject_Call(method, no_args, kwargs) : NULL;
	Py_XDECREF(no_args);
	Py_DECREF(kwargs);
	if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {
		PyErr_Clear();
		capsule = PyObject_CallNoArgs(method);
	}
	return capsule;
}

/* Takes the tensor out of `capsule` (consumed: renamed, so that its destructor leaves it to
 * us); NULL with an error raised when it holds none hmr can read. */
static const DLTensor *consume_capsule(PyObject *capsule, HmrPySource *source)
{
	if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
		DLManagedTensorVersioned *managed = PyCapsule_GetPointer(capsule, "dltensor_versioned");
		if (!managed || PyCapsule_SetName(capsule, "used_dltensor_versioned") != 0)
			return NULL;
		source->dl_versioned = managed;
		if (managed->version.major != 1) {
			/* (Read before the deleter, which frees the struct itself.) */
			const unsigned major = managed->version.major, minor = managed->version.minor;
			dlpack_delete(source);
			hmr_py_raise_code(HMR_EINVAL, kWhat,
					  "the DLPack tensor is of version %u.%u; hmr reads 1.x", major,
					  minor);
			return NULL;
		}
		source->readonly = (managed->flags & HMR_DLPACK_FLAG_READ_ONLY) != 0;
		source->copied = (managed->flags & HMR_DLPACK_FLAG_IS_COPIED) != 0;
		return &managed->dl_tensor;
	}
	DLManagedTensor *managed = PyCapsule_GetPointer(capsule, "dltensor");
	if (!managed) {
		PyErr_Clear();
		hmr_py_raise_code(HMR_EINVAL, kWhat,
				  "__dlpack__ did not return a capsule named \"dltensor\" or "
				  "\"dltensor_versioned\" (a capsule may be consumed once)");
		return NULL;
	}
	/* DLPack: the consumer renames the capsule "used_dltensor" and from then on calls the
	 * deleter itself; the capsule's destructor leaves a renamed capsule alone. */
	if (PyCapsule_SetName(capsule, "used_dltensor") != 0)
		return NULL;
	source->dl = managed;
	source->readonly = 0; /* DLPack before 1.0 says nothing about it */
	return &managed->dl_tensor;
}

static int from_dlpack(PyObject *obj, PyObject *method, HmrPySource *source)
{
	PyObject *capsule = call_dlpack(method);
	if (!capsule) { /* (a tensor that needs grad, a conjugate view, a sparse layout, ...) */
		hmr_py_raise_from_current(HMR_EINVAL, kWhat, "the object's __dlpack__() refused");
		return -1;
	}
	source->dl = NULL;
	source->dl_versioned = NULL;
	const DLTensor *t = consume_capsule(capsule, source);
	Py_DECREF(capsule);
	if (!t)
		return -1;
	size_t length = 0;
	const char *no_size = dlpack_bytes(t, &length);
	if (no_size) {
		dlpack_delete(source);
		hmr_py_raise_code(HMR_EINVAL, kWhat, "the DLPack tensor has %s", no_size);
		return -1;
	}
	if (!dlpack_dense(t)) {
		dlpack_delete(source);
		hmr_py_raise_code(HMR_EINVAL, kWhat,
				  "the DLPack tensor is not contiguous (strides leave gaps or repeat "
				  "elements): register a contiguous copy");
		return -1;
	}
	source->kind = HMR_PY_SOURCE_DLPACK;
	source->address = (char *)t->data + t->byte_offset;
	source->length = length;
	source->device_memory = t->device.device_type != HMR_DL_CPU;
	Py_INCREF(obj);
	source->owner = obj;
	return 0;
}

static int unsigned_attr(PyObject *obj, PyObject *name, unsigned long long *out)
{
	PyObject *value = PyObject_GetAttr(obj, name);
	if (!value)
		return -1;
	*out = PyLong_AsUnsignedLongLong(value);
	Py_DECREF(value);
	return *out == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* One question to a tensor: through torch.Tensor's own method when `obj` is exactly a
 * torch.Tensor (a subclass may override it), else by name (with no bound method object made:
 * CPython looks the method up and calls it with obj). */
static PyObject *ask_tensor(PyObject *obj, PyObject *method, PyObject *name)
{
	if (method && Py_IS_TYPE(obj, (PyTypeObject *)hmr_py.torch_tensor_type))
		return PyObject_CallFunctionObjArgs(method, obj, NULL);
	return PyObject_CallMethodObjArgs(obj, name, NULL);
}

static int tensor_unsigned(PyObject *obj, PyObject *method, PyObject *name,
			   unsigned long long *out)
{
	PyObject *value = ask_tensor(obj, method, name);
	if (!value)
		return -1;
	*out = PyLong_AsUnsignedLongLong(value);
	Py_DECREF(value);
	return *out == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* Whether the tensor's `method` (a yes-or-no question torch.Tensor has) answers yes: 1, 0,
 * or -1 on error.  A torch without the method answers no. */
static int tensor_says(PyObject *obj, PyObject *method, PyObject *name)
{
	if (!method)
		return 0;
	PyObject *answer = ask_tensor(obj, method, name);
	if (!answer)
		return -1;
	const int yes = PyObject_IsTrue(answer);
	Py_DECREF(answer);
	return yes;
}

/* A torch question that failed with RuntimeError (what torch raises for a tensor the question
 * does not fit): 0 and the error cleared, so the DLPack route says why with torch's reason;
 * any other error: -1. */
static int torch_cannot(void)
{
	if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
		return -1;
	PyErr_Clear();
	return 0;
}

/* torch.Tensor: 1 when served, 0 when the DLPack route must serve it or say why (not
 * contiguous: it serves a dense permuted layout; no storage, as a sparse tensor has: its
 * __dlpack__ refuses with torch's reason), -1 on error.  A conjugate or negative view
 * (x.conj(), torch._neg_view(x), x.conj().imag), contiguous or not, is refused here: its
 * bytes are x's, its values their conjugate or negation, and a peer would read the bytes
 * (torch 1.13's __dlpack__ exports a negative view as it is). */
static int from_torch(PyObject *obj, HmrPySource *source)
{
	const int conjugate = tensor_says(obj, hmr_py.torch_is_conj, hmr_py.s_is_conj);
	const int negative =
		conjugate != 0 ? 0 : tensor_says(obj, hmr_py.torch_is_neg, hmr_py.s_is_neg);
	if (conjugate < 0 || negative < 0)
		return -1;
	if (conjugate || negative) {
		hmr_py_raise_code(HMR_EINVAL, kWhat,
				  "the tensor is a %s view: its memory holds the values before the "
				  "%s, which is what a peer would read; register "
				  "tensor.resolve_%s() (a copy with the values)",
				  conjugate ? "conjugate" : "negative",
				  conjugate ? "conjugation" : "negation", conjugate ? "conj" : "neg");
		return -1;
	}
	PyObject *contiguous = ask_tensor(obj, hmr_py.torch_is_contiguous, hmr_py.s_is_contiguous);
	if (!contiguous)
		return torch_cannot();
	int yes = PyObject_IsTrue(contiguous);
	Py_DECREF(contiguous);
	if (yes <= 0)
		return yes;
	unsigned long long address, length;
	if (tensor_unsigned(obj, hmr_py.torch_data_ptr, hmr_py.s_data_ptr, &address) != 0)
		return torch_cannot();
	if (hmr_py.torch_has_nbytes) {
		if (unsigned_attr(obj, hmr_py.s_nbytes, &length) != 0)
			return -1;
	} else {
		unsigned long long numel, element_size;
		if (tensor_unsigned(obj, hmr_py.torch_numel, hmr_py.s_numel, &numel) != 0 ||
		    tensor_unsigned(obj, hmr_py.torch_element_size, hmr_py.s_element_size,
				    &element_size) != 0)
			return -1;
		length = numel * element_size;
	}
	source->kind = HMR_PY_SOURCE_OBJECT;
	source->address = (void *)(uintptr_t)address;
	source->length = (size_t)length;
	Py_INCREF(obj);
	source->owner = obj;
	return 1;
}

/* torch.Tensor's method `name`, or NULL (and no error) when it has none. */
static PyObject *tensor_method(PyObject *tensor, PyObject *name)
{
	PyObject *method = PyObject_GetAttr(tensor, name);
	if (!method)
		PyErr_Clear();
	return method;
}

/* torch.Tensor, once torch is imported (never imported here: hmr does not depend on it). */
static int is_torch_tensor(PyObject *obj)
{
	if (!hmr_py.torch_tensor_type) {
		PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
		PyObject *torch = PyDict_GetItemWithError(modules, hmr_py.s_torch);
		if (!torch)
			return PyErr_Occurred() ? -1 : 0;
		PyObject *tensor = PyObject_GetAttr(torch, hmr_py.s_tensor);
		if (!tensor) {
			PyErr_Clear(); /* torch half imported */
			return 0;
		}
		hmr_py.torch_has_nbytes = PyObject_HasAttr(tensor, hmr_py.s_nbytes);
		hmr_py.torch_is_contiguous = tensor_method(tensor, hmr_py.s_is_contiguous);
		hmr_py.torch_is_conj = tensor_method(tensor, hmr_py.s_is_conj);
		hmr_py.torch_is_neg = tensor_method(tensor, hmr_py.s_is_neg);
		hmr_py.torch_data_ptr = tensor_method(tensor, hmr_py.s_data_ptr);
		hmr_py.torch_numel = tensor_method(tensor, hmr_py.s_numel);
		hmr_py.torch_element_size = tensor_method(tensor, hmr_py.s_element_size);
		hmr_py.torch_tensor_type = tensor;
	}
	return PyObject_TypeCheck(obj, (PyTypeObject *)hmr_py.torch_tensor_type);
}

/* A Pointer's attribute, which the caller may have changed since the Pointer checked it. */
static int pointer_field(PyObject *obj, PyObject *name, const char *text, unsigned long long *out)
{
	PyObject *value = PyObject_GetAttr(obj, name);
	if (!value)
		return -1;
	const int rc = hmr_py_unsigned(kWhat, text, value, out);
	Py_DECREF(value);
	return rc;
}

static int from_pointer(PyObject *obj, HmrPySource *source)
{
	unsigned long long address, length;
	if (pointer_field(obj, hmr_py.s_address, "a Pointer's address", &address) != 0 ||
	    pointer_field(obj, hmr_py.s_length, "a Pointer's length", &length) != 0)
		return -1;
	source->kind = HMR_PY_SOURCE_OBJECT;
	source->address = (void *)(uintptr_t)address;
	source->length = (size_t)length;
	/* The Pointer itself is kept: it holds its keepalive. */
	Py_INCREF(obj);
	source->owner = obj;
	return 0;
}

/* hmr/_sources.py parses the interface (a dict of tuples) and checks it. */
static int from_cuda_array_interface(PyObject *obj, HmrPySource *source)
{
	PyObject *parsed = PyObject_CallFunctionObjArgs(hmr_py.cuda_array_interface, obj, NULL);
	if (!parsed)
		return -1;
	unsigned long long address = 0, length = 0;
	int readonly = 0;
	int ok = PyArg_ParseTuple(parsed, "KKp", &address, &length, &readonly);
	Py_DECREF(parsed);
	if (!ok)
		return -1;
	source->kind = HMR_PY_SOURCE_OBJECT;
	source->address = (void *)(uintptr_t)address;
	source->length = (size_t)length;
	source->readonly = readonly;
	source->device_memory = 1;
	Py_INCREF(obj);
	source->owner = obj;
	return 0;
}

int hmr_py_source_get(PyObject *obj, int write, HmrPySource *source)
{
	memset(source, 0, sizeof *source);
	if (Py_IS_TYPE(obj, (PyTypeObject *)hmr_py.pointer_type))
		return from_pointer(obj, source);
	if (PyObject_CheckBuffer(obj))
		return from_buffer(obj, write, source);
	int torch = is_torch_tensor(obj);
	if (torch < 0)
		return -1;
	if (torch) {
		int served = from_torch(obj, source);
		if (served != 0)
			return served < 0 ? -1 : 0;
	}
	if (PyObject_TypeCheck(obj, (PyTypeObject *)hmr_py.pointer_type))
		return from_pointer(obj, source);
	PyObject *method = PyObject_GetAttr(obj, hmr_py.s_dlpack);
	if (method) {
		int rc = from_dlpack(obj, method, source);
		Py_DECREF(method);
		if (rc != 0)
			return -1;
		goto readonly_check;
	}
	if (!PyErr_ExceptionMatches(PyExc_AttributeError))
		return -1;
	PyErr_Clear();
	if (PyObject_HasAttr(obj, hmr_py.s_cuda_array_interface)) {
		if (from_cuda_array_interface(obj, source) != 0)
			return -1;
		goto readonly_check;
	}
	return no_memory(obj);
readonly_check:
	if (write && source->readonly) {
		hmr_py_source_release(source);
		hmr_py_raise_code(HMR_EACCES, kWhat,
				  "the memory is read-only and the access lets the NIC write it (READ, "
				  "RECV or REMOTE_WRITE)");
		return -1;
	}
	if (write && source->copied) {
		hmr_py_source_release(source);
		hmr_py_raise_code(HMR_EINVAL, kWhat,
				  "the DLPack export is a copy the producer made (IS_COPIED): what the "
				  "NIC writes there would never reach the object");
		return -1;
	}
	return 0;
}

int hmr_py_source_narrow(HmrPySource *source, unsigned long long offset, PyObject *length)
{
	size_t want;
	if (offset > source->length) {
		hmr_py_raise_code(HMR_EINVAL, kWhat, "offset %llu is past the object's %zu bytes",
				  offset, source->length);
		return -1;
	}
	if (!length || length == Py_None) {
		want = source->length - (size_t)offset;
	} else {
		unsigned long long n;
		if (hmr_py_unsigned(kWhat, "length", length, &n) != 0)
			return -1;
		if (n > source->length - offset) {
			hmr_py_raise_code(HMR_EINVAL, kWhat,
					  "offset %llu + length %llu is past the object's %zu bytes",
					  offset, n, source->length);
			return -1;
		}
		want = (size_t)n;
	}
	source->address = (char *)source->address + offset;
	source->length = want;
	return 0;
}

void hmr_py_source_release(HmrPySource *source)
{
	/* Often on an error path: a deleter or finaliser that runs Python code must not find the
	 * error set (CPython calls that a SystemError), and the error must survive it. */
	PyObject *type, *value, *trace;
	PyErr_Fetch(&type, &value, &trace);
	switch (source->kind) {
	case HMR_PY_SOURCE_BUFFER:
		PyBuffer_Release(&source->view);
		break;
	case HMR_PY_SOURCE_DLPACK:
		dlpack_delete(source);
		break;
	default:
		break;
	}
	source->kind = HMR_PY_SOURCE_NONE;
	Py_CLEAR(source->owner);
	PyErr_Restore(type, value, trace);
}
