/* hmr.Domain: one hmr_domain and the regions, remote keys and endpoints it handed out. */
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "hmr_py.h"

hmr_domain *hmr_py_domain_handle(HmrPyDomain *domain, const char *what)
{
	if (!domain->handle || domain->closing) {
		hmr_py_raise_closed(what);
		return NULL;
	}
	return domain->handle;
}

void hmr_py_link_child(HmrPyDomain *domain, HmrPyChild *child)
{
	HmrPyLink *head = &domain->children;
	child->link.next = head->next;
	child->link.prev = head;
	head->next->prev = &child->link;
	head->next = &child->link;
}

void hmr_py_unlink_child(HmrPyChild *child)
{
	if (!child->link.next)
		return;
	child->link.prev->next = child->link.next;
	child->link.next->prev = child->link.prev;
	child->link.next = child->link.prev = NULL;
}

void hmr_py_close_in_dealloc(PyObject *child, int (*close)(PyObject *))
{
	PyObject *type, *value, *trace; /* (an exception on its way stays as it was) */
	PyErr_Fetch(&type, &value, &trace);
	/* (Reported against the type: the object itself is being freed, and the hook would take
	 * a reference to it and drop it, running this dealloc a second time.) */
	if (close(child) != 0)
		PyErr_WriteUnraisable((PyObject *)Py_TYPE(child));
	PyErr_Restore(type, value, trace);
}

void hmr_py_child_free(HmrPyChild *child)
{
	PyTypeObject *type = Py_TYPE((PyObject *)child);
	hmr_py_unlink_child(child);
	Py_XDECREF((PyObject *)child->domain);
	freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
	tp_free(child);
	Py_DECREF((PyObject *)type); /* heap types: each instance holds its type */
}

static int close_child(HmrPyChild *child)
{
	switch (child->kind) {
	case HMR_PY_REGION:
		return hmr_py_region_close((PyObject *)child);
	case HMR_PY_REMOTE_KEY:
		return hmr_py_remote_key_close((PyObject *)child);
	default:
		return hmr_py_endpoint_close((PyObject *)child);
	}
}

/* Regions first (an endpoint cannot close while MRs are bound to it; a remote key is
 * independent): the list is newest first, so close by kind in two passes. */
static int close_children(HmrPyDomain *self)
{
	for (int pass = 0; pass < 2; ++pass) {
		HmrPyLink *link = self->children.next;
		while (link != &self->children) {
			HmrPyChild *child = (HmrPyChild *)(void *)((char *)link - offsetof(HmrPyChild, link));
			link = link->next;
			if ((pass == 0) != (child->kind != HMR_PY_ENDPOINT))
				continue;
			/* An endpoint another thread (or its dealloc) is closing without the GIL stays
			 * linked until that close ends: passed by, neither taken back to life nor
			 * restarted onto (Domain.close looped on it for ever); the in-flight count it
			 * holds makes close() raise BusyError after the loop. */
			if (child->kind == HMR_PY_ENDPOINT && hmr_py_endpoint_closing((PyObject *)child))
				continue;
			/* So is a region whose close deregisters without the GIL. */
			if (child->kind == HMR_PY_REGION && hmr_py_region_closing((PyObject *)child))
				continue;
			/* Closing may run Python code (a DLPack deleter, a source's finaliser) that
			 * closes other children: start again from the head each time. */
			Py_INCREF((PyObject *)child);
			int rc = close_child(child);
			Py_DECREF((PyObject *)child);
			if (rc != 0)
				return -1;
			link = self->children.next;
		}
	}
	return 0;
}

static PyObject *domain_close(HmrPyDomain *self, PyObject *unused)
{
	(void)unused;
	if (!self->handle)
		Py_RETURN_NONE;
	/* Another thread is inside this close (its hmr_domain_close runs without the GIL and may
	 * yet fail with EBUSY), or a finaliser run by the close below called close() again. */
	if (self->closing)
		return hmr_py_raise_code(HMR_EBUSY, "Domain.close",
					 "the domain is being closed (by another thread, or by a "
					 "finaliser that its close ran)");
	/* In a fork child the threads that were inside calls in the parent do not exist. */
	const int here = self->pid == getpid();
	if (self->in_flight > 0 && here)
		return hmr_py_raise_code(HMR_EBUSY, "Domain.close",
					 "%zd call(s) into the domain are running on other threads",
					 self->in_flight);
	/* Closing the children may run Python code (a DLPack deleter, a source's finaliser) that
	 * lets other threads run: from here on no call into the domain starts, and one that
	 * started before and let go of the GIL is waited for by the check after. */
	self->closing = 1;
	int closed = close_children(self);
	self->closing = 0;
	if (closed != 0)
		return NULL;
	if (self->in_flight > 0 && here)
		return hmr_py_raise_code(HMR_EBUSY, "Domain.close",
					 "%zd call(s) into the domain started on other threads while its "
					 "regions were being closed", self->in_flight);
	/* The handle stays until the close has ended: a close() on another thread meanwhile must
	 * not return as if the domain were closed (this one may yet fail with EBUSY and keep it
	 * open); marked closing, no call starts on it and that close() raises BusyError. */
	hmr_domain *handle = self->handle;
	self->closing = 1;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = hmr_domain_close(handle);
	Py_END_ALLOW_THREADS
	self->closing = 0;
	if (rc == -HMR_EBUSY) /* nothing was closed (hmr.h): still open, still ours */
		return hmr_py_raise(rc, "hmr_domain_close");
	self->handle = NULL;
	/* Any other failure closed the domain all the same (hmr.h: a NIC's close that went
	 * wrong, -HMR_EIO): the handle is gone, and only the error is left to say. */
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_domain_close");
	Py_RETURN_NONE;
}

static PyObject *domain_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
	static char *names[] = {"nic",	    "mr_mode",	       "cache_monitor", "nic_options",
				"provider", "allow_hmem_copy", NULL};
	const char *nic = "sim", *cache_monitor = NULL, *nic_options = NULL, *provider = NULL;
	PyObject *mr_mode_obj = Py_None;
	int allow_hmem_copy = 0;
	if (hmr_py_main_interpreter_only("Domain") != 0)
		return NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|s$Ozzzp:Domain", names, &nic, &mr_mode_obj,
					 &cache_monitor, &nic_options, &provider,
					 &allow_hmem_copy))
		return NULL;
	uint64_t mr_mode = HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY;
	if (mr_mode_obj != Py_None) {
		unsigned long long bits;
		if (hmr_py_unsigned("Domain", "mr_mode", mr_mode_obj, &bits) != 0)
			return NULL;
		mr_mode = bits;
	}
	PyObject *options = NULL;
	if (provider) {
		if (strcmp(nic, "ofi") != 0)
			return hmr_py_raise_code(HMR_EINVAL, "Domain",
						 "provider= is for nic=\"ofi\" (libfabric), not \"%s\"",
						 nic);
		options = nic_options && nic_options[0]
				  ? PyUnicode_FromFormat("provider=%s;%s", provider, nic_options)
				  : PyUnicode_FromFormat("provider=%s", provider);
		if (!options || !(nic_options = PyUnicode_AsUTF8AndSize(options, NULL))) {
			Py_XDECREF(options);
			return NULL;
		}
	}
	struct hmr_domain_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.nic = nic;
	attr.nic_options = nic_options;
	attr.mr_mode = mr_mode;
	attr.cache_monitor = cache_monitor;
	/* Device memory the NIC cannot reach is registered through a host shadow
	 * (MemoryRegion.sync moves the bytes); without it such a registration fails with why. */
	attr.flags = allow_hmem_copy ? HMR_DOMAIN_ALLOW_HMEM_COPY : 0;
	hmr_domain *handle = NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = hmr_domain_open(&attr, &handle);
	Py_END_ALLOW_THREADS
	Py_XDECREF(options);
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_domain_open");
	HmrPyDomain *self = (HmrPyDomain *)PyType_GenericAlloc(type, 0);
	if (!self) {
		hmr_domain_close(handle);
		return NULL;
	}
	self->handle = handle;
	self->children.next = self->children.prev = &self->children;
	self->pid = getpid();
	self->mr_mode = attr.mr_mode;
	self->key_size = attr.mr_key_size;
	self->nic = PyUnicode_FromString(nic);
	self->cache_monitor = PyUnicode_FromString(attr.cache_monitor ? attr.cache_monitor : "");
	if (!self->nic || !self->cache_monitor) {
		Py_DECREF((PyObject *)self);
		return NULL;
	}
	return (PyObject *)self;
}

static void domain_dealloc(HmrPyDomain *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);
	/* Children hold a reference to their domain, so none is open here. */
	if (self->handle) {
		PyObject *error_type, *error, *trace; /* (an exception on its way stays as it was) */
		PyErr_Fetch(&error_type, &error, &trace);
		hmr_domain *handle = self->handle;
		self->handle = NULL;
		int rc;
		Py_BEGIN_ALLOW_THREADS /* as Domain.close: it may wait for the NIC */
		rc = hmr_domain_close(handle);
		Py_END_ALLOW_THREADS
		if (rc != 0) {
			hmr_py_raise(rc, "hmr_domain_close (Domain collected)");
			PyErr_WriteUnraisable((PyObject *)type); /* (not self: see above) */
		}
		PyErr_Restore(error_type, error, trace);
	}
	Py_XDECREF(self->nic);
	Py_XDECREF(self->cache_monitor);
	freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
	tp_free(self);
	Py_DECREF((PyObject *)type);
}

static PyObject *domain_register(HmrPyDomain *self, PyObject *const *args, Py_ssize_t nargs,
				 PyObject *kwnames)
{
	return hmr_py_region_new(self, args, nargs, kwnames);
}

static PyObject *domain_exit(HmrPyDomain *self, PyObject *args)
{
	(void)args;
	return domain_close(self, NULL);
}

#define STAT(name) {#name, offsetof(struct hmr_domain_stats, name)}
static const struct {
	const char *name;
	size_t offset;
} kStats[] = {
	STAT(mr_open), STAT(mr_bytes), STAT(registrations), STAT(registration_errors),
	STAT(nic_registrations), STAT(nic_deregistrations), STAT(registration_ns), STAT(rma_ops),
	STAT(rma_bytes), STAT(rma_errors), STAT(cache_hits), STAT(cache_misses),
	STAT(cache_invalidations), STAT(cache_evictions), STAT(cache_uncached),
	STAT(cache_regions), STAT(cache_bytes), STAT(cache_in_use), STAT(deregistration_ns),
	STAT(cache_pressure_evictions), STAT(nic_refusal_retries), STAT(nic_refusals),
	STAT(nic_registrations_held), STAT(nic_pinned_bytes),
};
#undef STAT

static int set_item(PyObject *dict, const char *key, PyObject *value)
{
	if (!value)
		return -1;
	int rc = PyDict_SetItemString(dict, key, value);
	Py_DECREF(value);
	return rc;
}

static PyObject *domain_stats(HmrPyDomain *self, PyObject *unused)
{
	(void)unused;
	hmr_domain *handle = hmr_py_domain_handle(self, "Domain.stats");
	if (!handle)
		return NULL;
	struct hmr_domain_stats stats;
	memset(&stats, 0, sizeof stats);
	stats.size = sizeof stats;
	int rc = hmr_domain_query_stats(handle, &stats);
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_domain_query_stats");
	PyObject *dict = PyDict_New();
	for (size_t i = 0; dict && i < sizeof kStats / sizeof kStats[0]; ++i) {
		uint64_t value;
		memcpy(&value, (const char *)&stats + kStats[i].offset, sizeof value);
		if (set_item(dict, kStats[i].name, PyLong_FromUnsignedLongLong(value)) != 0)
			Py_CLEAR(dict);
	}
	return dict;
}

static PyObject *domain_md_query(HmrPyDomain *self, PyObject *args, PyObject *kwargs)
{
	static char *names[] = {"reg_cost", NULL};
	int reg_cost = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:md_query", names, &reg_cost))
		return NULL;
	hmr_domain *handle = hmr_py_domain_handle(self, "Domain.md_query");
	if (!handle)
		return NULL;
	struct hmr_md_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.field_mask = reg_cost ? HMR_MD_ATTR_REG_COST : 0;
	int rc;
	++self->in_flight; /* close() must wait for it */
	Py_BEGIN_ALLOW_THREADS /* measuring the cost registers on the NIC */
	rc = hmr_md_query(handle, &attr);
	Py_END_ALLOW_THREADS
	--self->in_flight;
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_md_query");
	PyObject *dict = PyDict_New();
	if (!dict)
		return NULL;
	int failed =
		set_item(dict, "flags", PyLong_FromUnsignedLongLong(attr.flags)) ||
		set_item(dict, "max_reg", PyLong_FromUnsignedLongLong(attr.max_reg)) ||
		set_item(dict, "key_size", PyLong_FromSize_t(attr.key_size)) ||
		set_item(dict, "rkey_packed_size", PyLong_FromSize_t(attr.rkey_packed_size)) ||
		set_item(dict, "reg_mem_types", PyLong_FromUnsignedLongLong(attr.reg_mem_types)) ||
		set_item(dict, "detect_mem_types",
			 PyLong_FromUnsignedLongLong(attr.detect_mem_types)) ||
		set_item(dict, "alloc_mem_types", PyLong_FromUnsignedLongLong(attr.alloc_mem_types)) ||
		set_item(dict, "max_registrations", PyLong_FromSize_t(attr.max_registrations)) ||
		set_item(dict, "max_registrations_source",
			 PyUnicode_FromString(attr.max_registrations_source
						      ? attr.max_registrations_source : "")) ||
		set_item(dict, "max_pinned_bytes",
			 PyLong_FromUnsignedLongLong(attr.max_pinned_bytes)) ||
		set_item(dict, "max_pinned_bytes_source",
			 PyUnicode_FromString(attr.max_pinned_bytes_source
						      ? attr.max_pinned_bytes_source : "")) ||
		set_item(dict, "dmabuf_mem_types",
			 PyLong_FromUnsignedLongLong(attr.dmabuf_mem_types)) ||
		set_item(dict, "peer_direct_mem_types",
			 PyLong_FromUnsignedLongLong(attr.peer_direct_mem_types));
	if (!failed && reg_cost) {
		failed = set_item(dict, "reg_cost_overhead_ns",
				  PyFloat_FromDouble(attr.reg_cost.overhead_ns)) ||
			 set_item(dict, "reg_cost_ns_per_byte",
				  PyFloat_FromDouble(attr.reg_cost.ns_per_byte)) ||
			 set_item(dict, "reg_cost_measured", PyBool_FromLong(attr.reg_cost_measured));
	}
	if (failed)
		Py_CLEAR(dict);
	return dict;
}

static PyObject *domain_cache_flush(HmrPyDomain *self, PyObject *unused)
{
	(void)unused;
	hmr_domain *handle = hmr_py_domain_handle(self, "Domain.cache_flush");
	if (!handle)
		return NULL;
	int rc;
	++self->in_flight; /* close() must wait for it */
	Py_BEGIN_ALLOW_THREADS
	rc = hmr_domain_cache_flush(handle);
	Py_END_ALLOW_THREADS
	--self->in_flight;
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_domain_cache_flush");
	Py_RETURN_NONE;
}

static PyObject *domain_unpack_rkey(HmrPyDomain *self, PyObject *blob)
{
	return hmr_py_remote_key_new(self, blob);
}

static PyObject *domain_endpoint(HmrPyDomain *self, PyObject *unused)
{
	(void)unused;
	return hmr_py_endpoint_new(self);
}

static PyObject *get_closed(HmrPyDomain *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->handle == NULL);
}

static PyObject *get_mr_mode(HmrPyDomain *self, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(self->mr_mode);
}

static PyObject *get_key_size(HmrPyDomain *self, void *unused)
{
	(void)unused;
	return PyLong_FromSize_t(self->key_size);
}

static PyObject *get_nic(HmrPyDomain *self, void *unused)
{
	(void)unused;
	Py_INCREF(self->nic);
	return self->nic;
}

static PyObject *get_cache_monitor(HmrPyDomain *self, void *unused)
{
	(void)unused;
	Py_INCREF(self->cache_monitor);
	return self->cache_monitor;
}

static PyObject *domain_repr(HmrPyDomain *self)
{
	return PyUnicode_FromFormat("<hmr.Domain nic=%R%s>", self->nic,
				    self->handle ? "" : " closed");
}

static PyMethodDef domain_methods[] = {
	{"register", (PyCFunction)(void (*)(void))domain_register, METH_FASTCALL | METH_KEYWORDS,
	 "register(obj, access=REMOTE_READ | REMOTE_WRITE, *, offset=0, length=None)\n--\n\n"
	 "Registers obj's memory (buffer protocol, __dlpack__, __cuda_array_interface__ or\n"
	 "hmr.Pointer) and returns a MemoryRegion that keeps obj alive until closed."},
	{"close", (PyCFunction)domain_close, METH_NOARGS,
	 "close()\n--\n\nCloses the regions, remote keys and endpoints still open, then the\n"
	 "domain.  A second close does nothing."},
	{"stats", (PyCFunction)domain_stats, METH_NOARGS,
	 "stats()\n--\n\nhmr_domain_stats as a dict keyed by its field names."},
	{"md_query", (PyCFunction)(void (*)(void))domain_md_query, METH_VARARGS | METH_KEYWORDS,
	 "md_query(*, reg_cost=False)\n--\n\nhmr_md_attr as a dict (reg_cost=True also measures\n"
	 "the registration cost, registering on the NIC once per domain)."},
	{"cache_flush", (PyCFunction)domain_cache_flush, METH_NOARGS,
	 "cache_flush()\n--\n\nDeregisters every cached registration no region holds."},
	{"unpack_rkey", (PyCFunction)domain_unpack_rkey, METH_O,
	 "unpack_rkey(blob)\n--\n\nA peer's packed key (MemoryRegion.pack_rkey()) as a\n"
	 "RemoteKey of this domain."},
	{"endpoint", (PyCFunction)domain_endpoint, METH_NOARGS,
	 "endpoint()\n--\n\nAn Endpoint for RMA on the software NIC (sim)."},
	{"__enter__", hmr_py_enter_self, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)domain_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef domain_getset[] = {
	{"closed", (getter)get_closed, NULL, "True once closed.", NULL},
	{"nic", (getter)get_nic, NULL, "The NIC adapter (\"sim\", \"verbs\", \"ofi\").", NULL},
	{"mr_mode", (getter)get_mr_mode, NULL, "The negotiated mr_mode bits (MR_*).", NULL},
	{"key_size", (getter)get_key_size, NULL, "Bytes of a remote key.", NULL},
	{"cache_monitor", (getter)get_cache_monitor, NULL,
	 "The registration cache's monitor (\"disabled\" without a cache).", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot domain_slots[] = {
	{Py_tp_doc, "Domain(nic=\"sim\", *, mr_mode=None, cache_monitor=None, nic_options=None, "
		    "provider=None)\n--\n\nAn hmr domain: one NIC, its registration cache and "
		    "statistics.\nA context manager; close() closes what is still open of it."},
	{Py_tp_new, domain_new},
	{Py_tp_dealloc, domain_dealloc},
	{Py_tp_repr, domain_repr},
	{Py_tp_methods, domain_methods},
	{Py_tp_getset, domain_getset},
	{0, NULL},
};

static PyType_Spec domain_spec = {
	.name = "hmr.Domain",
	.basicsize = sizeof(HmrPyDomain),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = domain_slots,
};

int hmr_py_domain_init_type(PyObject *module)
{
	return hmr_py_add_type(module, &domain_spec, "Domain", &hmr_py.domain_type);
}
