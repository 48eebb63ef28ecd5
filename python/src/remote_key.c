/* hmr.RemoteKey: a peer's packed key (MemoryRegion.pack_rkey) unpacked in this domain. */
#include <string.h>

#include "hmr_py.h"

typedef struct {
	HMR_PY_CHILD_HEAD
	hmr_rkey *rkey; /* NULL once released */
	struct hmr_rkey_info info;
} HmrPyRemoteKey;

PyObject *hmr_py_remote_key_new(HmrPyDomain *domain, PyObject *blob)
{
	if (!hmr_py_domain_handle(domain, "Domain.unpack_rkey"))
		return NULL;
	Py_buffer view;
	if (PyObject_GetBuffer(blob, &view, PyBUF_SIMPLE) != 0)
		return NULL;
	/* The export may have run Python code (a class's __buffer__) that closed the domain: the
	 * handle is looked at again (nothing lets go of the GIL from here to the call). */
	hmr_domain *handle = hmr_py_domain_handle(domain, "Domain.unpack_rkey");
	if (!handle) {
		PyBuffer_Release(&view);
		return NULL;
	}
	hmr_rkey *rkey = NULL;
	int rc = hmr_rkey_unpack(handle, view.buf, (size_t)view.len, &rkey);
	PyBuffer_Release(&view);
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_rkey_unpack");
	HmrPyRemoteKey *self = (HmrPyRemoteKey *)PyType_GenericAlloc(hmr_py.remote_key_type, 0);
	if (!self) {
		hmr_rkey_release(rkey);
		return NULL;
	}
	self->kind = HMR_PY_REMOTE_KEY;
	Py_INCREF((PyObject *)domain);
	self->domain = domain;
	self->rkey = rkey;
	self->info.size = sizeof self->info;
	rc = hmr_rkey_query(rkey, &self->info);
	hmr_py_link_child(domain, (HmrPyChild *)self);
	if (rc != 0) {
		hmr_py_raise(rc, "hmr_rkey_query");
		Py_DECREF((PyObject *)self);
		return NULL;
	}
	return (PyObject *)self;
}

int hmr_py_remote_key_close(PyObject *obj)
{
	HmrPyRemoteKey *self = (HmrPyRemoteKey *)obj;
	if (!self->rkey)
		return 0;
	/* Released whatever it returns (hmr.h): the handle is let go either way. */
	int rc = hmr_rkey_release(self->rkey);
	self->rkey = NULL;
	hmr_py_unlink_child((HmrPyChild *)self);
	if (rc != 0) {
		hmr_py_raise(rc, "hmr_rkey_release");
		return -1;
	}
	return 0;
}

static PyObject *rkey_release(PyObject *self, PyObject *unused)
{
	(void)unused;
	if (hmr_py_remote_key_close(self) != 0)
		return NULL;
	Py_RETURN_NONE;
}

static void rkey_dealloc(HmrPyRemoteKey *self)
{
	if (self->rkey)
		hmr_py_close_in_dealloc((PyObject *)self, hmr_py_remote_key_close);
	hmr_py_child_free((HmrPyChild *)self);
}

/* Its cached facts are refused once released, and in a forked child (as the C calls are). */
static int check_open(HmrPyRemoteKey *self, const char *what)
{
	if (!self->rkey) {
		hmr_py_raise_closed(what);
		return -1;
	}
	if (self->domain->pid != hmr_py_this_process) {
		hmr_py_raise_inherited(what);
		return -1;
	}
	return 0;
}

static PyObject *get_address(HmrPyRemoteKey *self, void *unused)
{
	(void)unused;
	return check_open(self, "RemoteKey.address") ? NULL
						     : PyLong_FromUnsignedLongLong(self->info.addr);
}

static PyObject *get_length(HmrPyRemoteKey *self, void *unused)
{
	(void)unused;
	return check_open(self, "RemoteKey.length") ? NULL
						    : PyLong_FromUnsignedLongLong(self->info.length);
}

static PyObject *get_key(HmrPyRemoteKey *self, void *unused)
{
	(void)unused;
	return check_open(self, "RemoteKey.key") ? NULL : PyLong_FromUnsignedLongLong(self->info.key);
}

static PyObject *get_iface(HmrPyRemoteKey *self, void *unused)
{
	(void)unused;
	return check_open(self, "RemoteKey.iface")
		       ? NULL
		       : PyUnicode_FromString(hmr_py_iface_name(self->info.iface));
}

static PyObject *get_device(HmrPyRemoteKey *self, void *unused)
{
	(void)unused;
	return check_open(self, "RemoteKey.device") ? NULL
						    : PyLong_FromUnsignedLongLong(self->info.device);
}

static PyObject *get_raw_key(HmrPyRemoteKey *self, void *unused)
{
	(void)unused;
	if (check_open(self, "RemoteKey.raw_key"))
		return NULL;
	return PyBytes_FromStringAndSize((const char *)self->info.raw_key,
					 (Py_ssize_t)self->info.raw_key_size);
}

static PyObject *get_closed(HmrPyRemoteKey *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->rkey == NULL);
}

static PyObject *rkey_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return rkey_release(self, NULL);
}

static PyMethodDef rkey_methods[] = {
	{"release", rkey_release, METH_NOARGS,
	 "release()\n--\n\nReleases the key (hmr_rkey_release); a second release does nothing."},
	{"__enter__", hmr_py_enter_self, METH_NOARGS, NULL},
	{"__exit__", rkey_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef rkey_getset[] = {
	{"address", (getter)get_address, NULL, "Remote address of the region's first byte.", NULL},
	{"length", (getter)get_length, NULL, "Bytes the region covers from address.", NULL},
	{"key", (getter)get_key, NULL, "The key for this domain's Endpoint.write/read.", NULL},
	{"iface", (getter)get_iface, NULL, "What the remote memory is (\"system\", \"cuda\", ...).",
	 NULL},
	{"device", (getter)get_device, NULL, "The remote memory's device.", NULL},
	{"raw_key", (getter)get_raw_key, NULL, "The key as the peer's NIC gave it.", NULL},
	{"closed", (getter)get_closed, NULL, "True once released.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyObject *rkey_no_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
	(void)type;
	(void)args;
	(void)kwargs;
	PyErr_SetString(PyExc_TypeError, "RemoteKey objects come from Domain.unpack_rkey()");
	return NULL;
}

static PyType_Slot rkey_slots[] = {
	{Py_tp_doc, "A peer's region, as this domain reaches it (Domain.unpack_rkey).  A "
		    "context manager; release() gives it back."},
	{Py_tp_new, rkey_no_new},
	{Py_tp_dealloc, rkey_dealloc},
	{Py_tp_methods, rkey_methods},
	{Py_tp_getset, rkey_getset},
	{0, NULL},
};

static PyType_Spec rkey_spec = {
	.name = "hmr.RemoteKey",
	.basicsize = sizeof(HmrPyRemoteKey),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = rkey_slots,
};

int hmr_py_remote_key_init_type(PyObject *module)
{
	return hmr_py_add_type(module, &rkey_spec, "RemoteKey", &hmr_py.remote_key_type);
}
