/* hmr.Endpoint: the software NIC's RMA (hmr_ep_*), for examples and tests: a peer's region is
 * written and read through its unpacked key, as a transport would over a real NIC. */
#include <string.h>
#include <unistd.h>

#include "hmr_py.h"

typedef struct {
	HMR_PY_CHILD_HEAD
	hmr_ep *ep;           /* NULL once closed */
	Py_ssize_t in_flight; /* write/read/connect calls running without the GIL: close()
			       * refuses */
	int closing;          /* close() is in hmr_ep_close without the GIL: no call starts,
			       * and Domain.close passes it by (domain.c) */
	int connecting;       /* connect() is in hmr_ep_connect without the GIL */
	PyObject *peer;       /* the Endpoint connected to, kept alive (hmr_ep_close of a peer
			       * disconnects it); NULL when none.  Two endpoints connected to each
			       * other are a cycle: the type takes part in Python's GC. */
} HmrPyEndpoint;

PyObject *hmr_py_endpoint_new(HmrPyDomain *domain)
{
	hmr_domain *handle = hmr_py_domain_handle(domain, "Domain.endpoint");
	if (!handle)
		return NULL;
	hmr_ep *ep = NULL;
	int rc = hmr_ep_open(handle, NULL, &ep);
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_ep_open");
	HmrPyEndpoint *self = (HmrPyEndpoint *)PyType_GenericAlloc(hmr_py.endpoint_type, 0);
	if (!self) {
		hmr_ep_close(ep);
		return NULL;
	}
	self->kind = HMR_PY_ENDPOINT;
	Py_INCREF((PyObject *)domain);
	self->domain = domain;
	self->ep = ep;
	hmr_py_link_child(domain, (HmrPyChild *)self);
	return (PyObject *)self;
}

int hmr_py_endpoint_close(PyObject *obj)
{
	HmrPyEndpoint *self = (HmrPyEndpoint *)obj;
	if (!self->ep)
		return 0;
	/* A write or read runs in the endpoint without the GIL; closing under it would free it.
	 * (In a fork child the threads that were inside it in the parent do not exist.) */
	if (self->in_flight > 0 && self->domain->pid == getpid()) {
		hmr_py_raise_code(HMR_EBUSY, "Endpoint.close",
				  "a write or read of this endpoint is running on another thread");
		return -1;
	}
	if (self->closing) { /* another thread is inside its close, which may yet fail */
		hmr_py_raise_code(HMR_EBUSY, "Endpoint.close", "another thread is closing this endpoint");
		return -1;
	}
	/* hmr_ep_close waits for every RMA in the process to leave the links (a write holds them
	 * for its whole copy): without the GIL, and with this endpoint and its domain marked so
	 * that nothing starts on them meanwhile (Domain.close refuses while it runs). */
	HmrPyDomain *domain = self->domain;
	self->closing = 1;
	++domain->in_flight;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = hmr_ep_close(self->ep);
	Py_END_ALLOW_THREADS
	--domain->in_flight;
	self->closing = 0;
	if (rc == -HMR_EBUSY) { /* nothing was closed (hmr.h): still open, still ours */
		hmr_py_raise(rc, "hmr_ep_close");
		return -1;
	}
	/* Any other failure closed it all the same (hmr.h): the handle is let go, and the error
	 * raised now, with this close's reason (the peer's close below would say its own). */
	if (rc != 0)
		hmr_py_raise(rc, "hmr_ep_close");
	self->ep = NULL;
	/* Unlinked before the peer is let go: dropping it can run any code (its domain's
	 * dealloc releases the GIL), and Domain.close on another thread must not find a closed
	 * endpoint on its list (it looped for ever, or took a dying one for alive). */
	hmr_py_unlink_child((HmrPyChild *)self);
	PyObject *type, *value, *trace; /* (the error survives what the peer's dealloc runs) */
	PyErr_Fetch(&type, &value, &trace);
	Py_CLEAR(self->peer);
	PyErr_Restore(type, value, trace);
	if (rc != 0)
		return -1;
	return 0;
}

int hmr_py_endpoint_closing(PyObject *obj)
{
	return ((HmrPyEndpoint *)obj)->closing;
}

static hmr_ep *open_ep(HmrPyEndpoint *self, const char *what)
{
	if (!self->ep || self->closing)
		return (hmr_ep *)hmr_py_raise_closed(what);
	if (self->domain->closing)
		return (hmr_ep *)hmr_py_raise_domain_closing(what);
	return self->ep;
}

static PyObject *ep_close(PyObject *self, PyObject *unused)
{
	(void)unused;
	if (hmr_py_endpoint_close(self) != 0)
		return NULL;
	Py_RETURN_NONE;
}

static int ep_traverse(HmrPyEndpoint *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self)); /* heap types: each instance holds its type */
	Py_VISIT(self->peer);
	return 0;
}

static int ep_clear(HmrPyEndpoint *self)
{
	Py_CLEAR(self->peer);
	return 0;
}

static void ep_dealloc(HmrPyEndpoint *self)
{
	PyObject_GC_UnTrack((PyObject *)self);
	if (self->ep)
		hmr_py_close_in_dealloc((PyObject *)self, hmr_py_endpoint_close);
	Py_CLEAR(self->peer);
	hmr_py_child_free((HmrPyChild *)self);
}

static PyObject *ep_connect(HmrPyEndpoint *self, PyObject *other)
{
	hmr_ep *ep = open_ep(self, "Endpoint.connect");
	if (!ep)
		return NULL;
	if (!PyObject_TypeCheck(other, hmr_py.endpoint_type)) {
		PyErr_SetString(PyExc_TypeError, "connect() takes another hmr.Endpoint");
		return NULL;
	}
	HmrPyEndpoint *target = (HmrPyEndpoint *)other;
	hmr_ep *peer = open_ep(target, "Endpoint.connect (peer)");
	if (!peer)
		return NULL;
	/* Two connects of one endpoint at once would leave it holding whichever peer's object
	 * came back last, not the one hmr connected it to last. */
	if (self->connecting)
		return hmr_py_raise_code(HMR_EBUSY, "Endpoint.connect",
					 "another thread is connecting this endpoint");
	self->connecting = 1;
	/* hmr_ep_connect waits for every RMA in the process to leave the links, as close does:
	 * without the GIL, both endpoints and their domains held open meanwhile. */
	++self->in_flight;
	++target->in_flight;
	++self->domain->in_flight;
	++target->domain->in_flight;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = hmr_ep_connect(ep, peer);
	Py_END_ALLOW_THREADS
	--target->domain->in_flight;
	--self->domain->in_flight;
	--target->in_flight;
	--self->in_flight;
	self->connecting = 0;
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_ep_connect");
	PyObject *before = self->peer; /* (Py_XSETREF is not in the limited API) */
	Py_INCREF(other);
	self->peer = other;
	Py_XDECREF(before);
	Py_RETURN_NONE;
}

/* write(data, address, key) and read(out, address, key): the local side is any object
 * Domain.register takes, or a MemoryRegion (whose descriptor then goes with it). */
static PyObject *transfer(HmrPyEndpoint *self, PyObject *args, int is_read)
{
	const char *what = is_read ? "Endpoint.read" : "Endpoint.write";
	PyObject *local, *address_obj, *key_obj;
	unsigned long long address, key;
	/* (not "K": it wraps a negative number round instead of refusing it) */
	if (!PyArg_ParseTuple(args, is_read ? "OOO:read" : "OOO:write", &local, &address_obj,
			      &key_obj) ||
	    hmr_py_unsigned(what, "address", address_obj, &address) != 0 ||
	    hmr_py_unsigned(what, "key", key_obj, &key) != 0)
		return NULL;
	hmr_ep *ep = open_ep(self, what);
	if (!ep)
		return NULL;
	HmrPySource source;
	void *desc = NULL;
	hmr_mr *mr = hmr_py_region_mr(local);
	PyObject *target = local;
	if (!mr && PyObject_TypeCheck(local, hmr_py.region_type))
		return hmr_py_raise_closed(what); /* a MemoryRegion closed already */
	if (mr) {
		if (hmr_py_region_inherited(local))
			return hmr_py_raise_inherited(what);
		desc = hmr_mr_desc(mr);
		PyObject *obj = PyObject_GetAttrString(local, "obj");
		if (!obj)
			return NULL;
		target = obj;
	} else {
		Py_INCREF(target);
	}
	int rc = hmr_py_source_get(target, is_read, &source);
	Py_DECREF(target);
	if (rc != 0)
		return NULL;
	if (mr) { /* exactly the region's range */
		PyObject *region_address = PyObject_GetAttrString(local, "address");
		PyObject *region_length = PyObject_GetAttrString(local, "length");
		if (region_address && region_length) {
			source.address = PyLong_AsVoidPtr(region_address);
			source.length = PyLong_AsSize_t(region_length);
		}
		Py_XDECREF(region_address);
		Py_XDECREF(region_length);
		if (PyErr_Occurred()) {
			hmr_py_source_release(&source);
			return NULL;
		}
	}
	/* Reading the object ran Python code, which may have let another thread close the
	 * endpoint or the region: both are looked at again (nothing lets go of the GIL from here
	 * to the call). */
	ep = open_ep(self, what);
	if (!ep || (mr && hmr_py_region_mr(local) != mr)) {
		if (ep)
			hmr_py_raise_closed(what);
		hmr_py_source_release(&source);
		return NULL;
	}
	HmrPyDomain *domain = self->domain;
	++domain->in_flight;
	++self->in_flight;
	if (mr)
		hmr_py_region_hold(local, +1); /* its descriptor is in use */
	Py_BEGIN_ALLOW_THREADS /* a copy of up to the whole buffer */
	if (is_read)
		rc = hmr_ep_read(ep, source.address, source.length, desc, address, key);
	else
		rc = hmr_ep_write(ep, source.address, source.length, desc, address, key);
	Py_END_ALLOW_THREADS
	if (mr)
		hmr_py_region_hold(local, -1);
	--self->in_flight;
	--domain->in_flight;
	/* The error is made before the source is let go: releasing it may run Python code (a
	 * DLPack deleter, a finaliser) whose own hmr calls would replace hmr_last_error(). */
	if (rc == 0) {
		hmr_py_source_release(&source);
		Py_RETURN_NONE;
	}
	hmr_py_raise(rc, is_read ? "hmr_ep_read" : "hmr_ep_write");
	hmr_py_source_release(&source); /* (keeps the exception aside while it runs) */
	return NULL;
}

static PyObject *ep_write(HmrPyEndpoint *self, PyObject *args)
{
	return transfer(self, args, 0);
}

static PyObject *ep_read(HmrPyEndpoint *self, PyObject *args)
{
	return transfer(self, args, 1);
}

static PyObject *get_closed(HmrPyEndpoint *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->ep == NULL);
}

static PyObject *ep_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return ep_close(self, NULL);
}

static PyMethodDef ep_methods[] = {
	{"connect", (PyCFunction)ep_connect, METH_O,
	 "connect(other)\n--\n\nMakes other (an Endpoint, of any domain on the same kind of NIC)\n"
	 "the target of this endpoint's write and read; this endpoint keeps other alive until\n"
	 "it is closed or connected elsewhere."},
	{"write", (PyCFunction)ep_write, METH_VARARGS,
	 "write(data, address, key)\n--\n\nRMA write of data's bytes to the peer's memory at\n"
	 "(address, key), e.g. a RemoteKey's address + offset and key."},
	{"read", (PyCFunction)ep_read, METH_VARARGS,
	 "read(out, address, key)\n--\n\nRMA read of len(out) bytes from the peer's memory at\n"
	 "(address, key) into out (writable)."},
	{"close", ep_close, METH_NOARGS, "close()\n--\n\nCloses the endpoint; a second close does "
					 "nothing."},
	{"__enter__", hmr_py_enter_self, METH_NOARGS, NULL},
	{"__exit__", ep_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef ep_getset[] = {
	{"closed", (getter)get_closed, NULL, "True once closed.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyObject *ep_no_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
	(void)type;
	(void)args;
	(void)kwargs;
	PyErr_SetString(PyExc_TypeError, "Endpoint objects come from Domain.endpoint()");
	return NULL;
}

static PyType_Slot ep_slots[] = {
	{Py_tp_doc, "An RMA endpoint of the software NIC (Domain.endpoint); a context manager."},
	{Py_tp_new, ep_no_new},
	{Py_tp_dealloc, ep_dealloc},
	{Py_tp_traverse, ep_traverse},
	{Py_tp_clear, ep_clear},
	{Py_tp_methods, ep_methods},
	{Py_tp_getset, ep_getset},
	{0, NULL},
};

static PyType_Spec ep_spec = {
	.name = "hmr.Endpoint",
	.basicsize = sizeof(HmrPyEndpoint),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = ep_slots,
};

int hmr_py_endpoint_init_type(PyObject *module)
{
	return hmr_py_add_type(module, &ep_spec, "Endpoint", &hmr_py.endpoint_type);
}
