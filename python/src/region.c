/* hmr.MemoryRegion and Domain.register: the fast path.  A cached register + close of a
 * buffer-protocol object is one buffer export, hmr_mr_reg, one object, hmr_mr_close and the
 * export's release; everything else a region can say (key, descriptor, what the memory is)
 * is asked of hmr only when read. */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hmr_py.h"

typedef struct {
	HMR_PY_CHILD_HEAD
	hmr_mr *mr; /* NULL once closed */
	Py_ssize_t in_flight; /* sync() and Endpoint transfers using it, running without the
			       * GIL: close() refuses while any runs (it would free the MR) */
	uint64_t access;
	int deregisters_on_close; /* the cache does not keep it: its close is a NIC deregistration,
				   * made without the GIL as its miss was */
	int closing; /* such a close is running without the GIL (mr is NULL meanwhile) */
	int queried; /* info below read (hmr_mr_query) */
	struct hmr_mr_info info;
	HmrPySource source;
} HmrPyRegion;

static const uint64_t kDefaultAccess = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
/* The access bits under which the NIC writes into the memory (fi_mr(3)): READ (the local end
 * of an RMA read: the result lands here), RECV and REMOTE_WRITE.  WRITE and SEND make it the
 * source the NIC reads; REMOTE_READ lets a peer read it.  Only these need a writable export
 * (as core/memory_region_ops.cpp's write-prefetch and verbs' LOCAL_WRITE read them). */
static const uint64_t kNicWrites = HMR_READ | HMR_RECV | HMR_REMOTE_WRITE;

/* What a registration that took longer cannot have been: a cache hit (a few hundred
 * nanoseconds to a few microseconds here); a NIC registration of the smallest range takes
 * longer, of a large one milliseconds.  Holding the GIL this long by mistake is harmless. */
static const uint64_t kQuickNs = 20000;

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec now;
	clock_gettime(clock, &now);
	return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* The precise clock costs ~45 ns a reading on this machine's VM, a third of a hit: a hinted
 * registration reads the coarse one (~10 ns, ticks of a few ms), which tells a miss of
 * milliseconds, the kind that matters, from a hit (one ends in another tick about once in
 * 20 000 hits, which costs the next registration its hint).  The key tells the rest. */
static uint64_t monotonic_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static uint64_t coarse_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC_COARSE);
}

/* Whether the cache keeps the region's registration (its close then only drops a
 * reference).  The answer fills the region's info, which its getters then read without
 * asking hmr again. */
static int kept_by_the_cache(HmrPyRegion *self)
{
	memset(&self->info, 0, sizeof self->info);
	self->info.size = sizeof self->info;
	self->queried = hmr_mr_query(self->mr, &self->info) == 0;
	return self->queried && self->info.cached;
}

static HmrPyHint *hint_slot(HmrPyDomain *domain, const void *address)
{
	uintptr_t a = (uintptr_t)address;
	return &domain->hints[((a >> 6) ^ (a >> 17)) & (HMR_PY_HINT_SLOTS - 1)];
}

/* (obj, access=..., *, offset=0, length=None) without PyArg_Parse*: this is the hot path. */
static int parse_register(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
			  uint64_t *access, unsigned long long *offset, PyObject **length)
{
	if (nargs < 1 || nargs > 2) {
		PyErr_Format(PyExc_TypeError,
			     "register() takes obj and an optional access (%zd positional given)",
			     nargs);
		return -1;
	}
	unsigned long long value;
	if (nargs == 2) {
		if (hmr_py_unsigned("Domain.register", "access", args[1], &value) != 0)
			return -1;
		*access = value;
	}
	Py_ssize_t keywords = kwnames ? PyTuple_Size(kwnames) : 0;
	for (Py_ssize_t i = 0; i < keywords; ++i) {
		PyObject *name = PyTuple_GetItem(kwnames, i);
		PyObject *arg = args[nargs + i];
		if (name == hmr_py.s_access ||
		    (nargs < 2 && PyUnicode_Compare(name, hmr_py.s_access) == 0)) {
			if (nargs == 2)
				goto twice;
			if (hmr_py_unsigned("Domain.register", "access", arg, &value) != 0)
				return -1;
			*access = value;
		} else if (name == hmr_py.s_offset || PyUnicode_Compare(name, hmr_py.s_offset) == 0) {
			if (hmr_py_unsigned("Domain.register", "offset", arg, offset) != 0)
				return -1;
		} else if (name == hmr_py.s_length || PyUnicode_Compare(name, hmr_py.s_length) == 0) {
			*length = arg;
		} else {
			PyErr_Format(PyExc_TypeError, "register() got an unexpected keyword %R", name);
			return -1;
		}
	}
	return 0;
twice:
	PyErr_SetString(PyExc_TypeError, "register() got access twice");
	return -1;
}

PyObject *hmr_py_region_new(HmrPyDomain *domain, PyObject *const *args, Py_ssize_t nargs,
			    PyObject *kwnames)
{
	uint64_t access = kDefaultAccess;
	unsigned long long offset = 0;
	PyObject *length = NULL;
	if (parse_register(args, nargs, kwnames, &access, &offset, &length) != 0)
		return NULL;
	hmr_domain *handle = hmr_py_domain_handle(domain, "Domain.register");
	if (!handle)
		return NULL;
	HmrPyRegion *self = (HmrPyRegion *)PyType_GenericAlloc(hmr_py.region_type, 0);
	if (!self)
		return NULL;
	self->kind = HMR_PY_REGION;
	Py_INCREF((PyObject *)domain);
	self->domain = domain;
	self->access = access;
	if (hmr_py_source_get(args[0], (access & kNicWrites) != 0,
			      &self->source) != 0)
		goto fail;
	if ((offset || length) && hmr_py_source_narrow(&self->source, offset, length) != 0)
		goto fail;
	/* Reading the object ran Python code, which may have let another thread close the domain:
	 * the handle is looked at again (nothing lets go of the GIL from here to the call). */
	handle = hmr_py_domain_handle(domain, "Domain.register");
	if (!handle)
		goto fail;
	void *address = self->source.address;
	size_t bytes = self->source.length;
	HmrPyHint *hint = hint_slot(domain, address);
	int rc;
	if (hint->address == (uintptr_t)address && hint->length == bytes && hint->access == access &&
	    hint->trusted) {
		const uint64_t began = coarse_ns();
		rc = hmr_mr_reg(handle, address, bytes, access, 0, 0, 0, &self->mr, NULL);
		/* Another key than the entry the hint stood for, or a tick of the coarse clock
		 * passed: a miss after all (the memory was freed and mapped again at the same
		 * address), made with the GIL held.  No longer trusted: memory reallocated at one
		 * address on every step had each step's registration made so. */
		if (rc == 0 && (hmr_mr_key(self->mr) != hint->key || coarse_ns() != began)) {
			hint->trusted = 0;
			hint->key = hmr_mr_key(self->mr);
			if (!kept_by_the_cache(self))
				self->deregisters_on_close = 1; /* (its close without the GIL too) */
		}
	} else {
		/* Probably a miss: the NIC registers, which may take long. */
		uint64_t took = 0;
		++domain->in_flight;
		Py_BEGIN_ALLOW_THREADS
		const uint64_t began = monotonic_ns();
		rc = hmr_mr_reg(handle, address, bytes, access, 0, 0, 0, &self->mr, NULL);
		took = monotonic_ns() - began;
		Py_END_ALLOW_THREADS
		--domain->in_flight;
		/* Hinted only when the cache kept it: a registration it does not keep (a domain
		 * without a cache, memory it cannot watch) is a NIC registration every time, and
		 * must never run with the GIL held.  Trusted once a registration found the entry
		 * the one before it made (its key) and was as quick as a hit: the next is then
		 * probably one too.  (The slot is looked at again: another thread may have filled
		 * it while the GIL was let go.) */
		if (rc == 0) {
			if (kept_by_the_cache(self)) {
				const uint64_t key = hmr_mr_key(self->mr);
				hint->trusted = hint->address == (uintptr_t)address &&
						hint->length == bytes && hint->access == access &&
						hint->key == key && took <= kQuickNs;
				hint->address = (uintptr_t)address;
				hint->length = bytes;
				hint->access = access;
				hint->key = key;
			} else {
				self->deregisters_on_close = 1;
			}
		}
	}
	if (rc != 0) {
		self->mr = NULL;
		hmr_py_raise(rc, "hmr_mr_reg");
		goto fail;
	}
	hmr_py_link_child(domain, (HmrPyChild *)self);
	return (PyObject *)self;
fail:
	Py_DECREF((PyObject *)self);
	return NULL;
}

int hmr_py_region_close(PyObject *obj)
{
	HmrPyRegion *self = (HmrPyRegion *)obj;
	/* Another thread's close deregisters without the GIL: this one is not done before it is
	 * (the memory stays registered, its export held, and the close may yet fail). */
	if (self->closing && self->domain->pid == getpid()) {
		hmr_py_raise_code(HMR_EBUSY, "MemoryRegion.close",
				  "another thread is closing this region");
		return -1;
	}
	if (!self->mr)
		return 0;
	/* sync() uses the MR and the memory without the GIL; closing under it would free both.
	 * (In a fork child the threads that were inside sync() in the parent do not exist.) */
	if (self->in_flight > 0 && self->domain->pid == getpid()) {
		hmr_py_raise_code(HMR_EBUSY, "MemoryRegion.close",
				  "sync() of this region, or an Endpoint's write or read from it, "
				  "is running on another thread");
		return -1;
	}
	hmr_mr *mr = self->mr;
	int rc;
	if (self->deregisters_on_close) {
		/* As long as the miss that made it: without the GIL.  Meanwhile the region reads as
		 * closed (its MR is NULL: no transfer or sync starts on it), Domain.close refuses
		 * (in flight) and passes it by if it runs already (closing). */
		HmrPyDomain *domain = self->domain;
		self->mr = NULL;
		self->closing = 1;
		++domain->in_flight;
		Py_BEGIN_ALLOW_THREADS
		rc = hmr_mr_close(mr);
		Py_END_ALLOW_THREADS
		--domain->in_flight;
		self->closing = 0;
	} else {
		rc = hmr_mr_close(mr);
	}
	if (rc == -HMR_EBUSY) { /* nothing was closed (hmr.h): still open, still ours */
		self->mr = mr;
		hmr_py_raise(rc, "hmr_mr_close");
		return -1;
	}
	/* Any other failure closed the MR all the same (hmr.h): the handle is let go, or a later
	 * close would close the next object made in its storage. */
	if (rc != 0)
		hmr_py_raise(rc, "hmr_mr_close");
	self->mr = NULL;
	hmr_py_unlink_child((HmrPyChild *)self);
	hmr_py_source_release(&self->source); /* (keeps an exception set aside while it runs) */
	return rc != 0 ? -1 : 0;
}

int hmr_py_region_closing(PyObject *obj)
{
	return ((HmrPyRegion *)obj)->closing;
}

hmr_mr *hmr_py_region_mr(PyObject *obj)
{
	if (!PyObject_TypeCheck(obj, hmr_py.region_type))
		return NULL;
	return ((HmrPyRegion *)obj)->mr;
}

void hmr_py_region_hold(PyObject *obj, int delta)
{
	((HmrPyRegion *)obj)->in_flight += delta;
}

int hmr_py_region_inherited(PyObject *obj)
{
	return PyObject_TypeCheck(obj, hmr_py.region_type) &&
	       ((HmrPyRegion *)obj)->domain->pid != hmr_py_this_process;
}

static PyObject *region_close(PyObject *self, PyObject *unused)
{
	(void)unused;
	if (hmr_py_region_close(self) != 0)
		return NULL;
	Py_RETURN_NONE;
}

static void region_dealloc(HmrPyRegion *self)
{
	if (self->mr)
		hmr_py_close_in_dealloc((PyObject *)self, hmr_py_region_close);
	hmr_py_source_release(&self->source);
	hmr_py_child_free((HmrPyChild *)self);
}

static hmr_mr *open_mr(HmrPyRegion *self, const char *what)
{
	if (!self->mr)
		hmr_py_raise_closed(what);
	else if (self->domain->pid != hmr_py_this_process)
		return (hmr_mr *)hmr_py_raise_inherited(what);
	else if (self->domain->closing)
		return (hmr_mr *)hmr_py_raise_domain_closing(what);
	return self->mr;
}

static PyObject *get_key(HmrPyRegion *self, void *unused)
{
	(void)unused;
	hmr_mr *mr = open_mr(self, "MemoryRegion.key");
	return mr ? PyLong_FromUnsignedLongLong(hmr_mr_key(mr)) : NULL;
}

static PyObject *get_desc(HmrPyRegion *self, void *unused)
{
	(void)unused;
	hmr_mr *mr = open_mr(self, "MemoryRegion.desc");
	if (!mr)
		return NULL;
	void *desc = hmr_mr_desc(mr);
	if (!desc)
		Py_RETURN_NONE;
	return PyLong_FromVoidPtr(desc);
}

static PyObject *get_address(HmrPyRegion *self, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong((uintptr_t)self->source.address);
}

static PyObject *get_length(HmrPyRegion *self, void *unused)
{
	(void)unused;
	return PyLong_FromSize_t(self->source.length);
}

static PyObject *get_access(HmrPyRegion *self, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(self->access);
}

static PyObject *get_closed(HmrPyRegion *self, void *unused)
{
	(void)unused;
	return PyBool_FromLong(self->mr == NULL);
}

static PyObject *get_obj(HmrPyRegion *self, void *unused)
{
	(void)unused;
	PyObject *obj = self->source.kind == HMR_PY_SOURCE_BUFFER ? self->source.view.obj
								   : self->source.owner;
	if (!obj)
		obj = Py_None;
	Py_INCREF(obj);
	return obj;
}

static int query(HmrPyRegion *self, const char *what)
{
	hmr_mr *mr = open_mr(self, what); /* closed: ClosedError, asked before or not */
	if (!mr)
		return -1;
	if (self->queried)
		return 0;
	memset(&self->info, 0, sizeof self->info);
	self->info.size = sizeof self->info;
	int rc = hmr_mr_query(mr, &self->info);
	if (rc != 0) {
		hmr_py_raise(rc, "hmr_mr_query");
		return -1;
	}
	self->queried = 1;
	return 0;
}

static PyObject *get_iface(HmrPyRegion *self, void *unused)
{
	(void)unused;
	if (query(self, "MemoryRegion.iface") != 0)
		return NULL;
	return PyUnicode_FromString(hmr_py_iface_name(self->info.iface));
}

static PyObject *get_device(HmrPyRegion *self, void *unused)
{
	(void)unused;
	if (query(self, "MemoryRegion.device") != 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(self->info.device);
}

static PyObject *get_kind(HmrPyRegion *self, void *unused)
{
	(void)unused;
	if (query(self, "MemoryRegion.kind") != 0)
		return NULL;
	return PyUnicode_FromString(hmr_py_kind_name(self->info.kind));
}

static PyObject *get_path(HmrPyRegion *self, void *unused)
{
	(void)unused;
	static const char *const names[] = {"address", "dmabuf", "peer_direct", "host_shadow",
					    "caller_dmabuf"};
	if (query(self, "MemoryRegion.path") != 0)
		return NULL;
	unsigned path = (unsigned)self->info.path;
	return PyUnicode_FromString(path < 5 ? names[path] : "unknown");
}

static PyObject *get_cached(HmrPyRegion *self, void *unused)
{
	(void)unused;
	if (query(self, "MemoryRegion.cached") != 0)
		return NULL;
	return PyBool_FromLong(self->info.cached);
}

/* The shadow's address of the first byte (HMR_MR_PATH_HOST_SHADOW), else None. */
static PyObject *get_shadow(HmrPyRegion *self, void *unused)
{
	(void)unused;
	if (query(self, "MemoryRegion.shadow") != 0)
		return NULL;
	if (!self->info.shadow)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong((uintptr_t)self->info.shadow);
}

/* hmr_mr_raw_attr's base: what a peer targets for the first byte (the shadow's address for a
 * host shadow, the region's own address otherwise, 0 where the domain has no VIRT_ADDR). */
static PyObject *get_remote_address(HmrPyRegion *self, void *unused)
{
	(void)unused;
	hmr_mr *mr = open_mr(self, "MemoryRegion.remote_address");
	if (!mr)
		return NULL;
	uint64_t base = 0;
	uint8_t raw[HMR_RKEY_RAW_MAX];
	size_t raw_size = sizeof raw;
	int rc = hmr_mr_raw_attr(mr, &base, raw, &raw_size, 0);
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_mr_raw_attr");
	return PyLong_FromUnsignedLongLong(base);
}

/* sync(direction, offset=0, length=None): hmr_mr_sync of [offset, offset + length) (None: to
 * the end), without the GIL (a device copy).  length=0 copies nothing, as asked (hmr_mr_sync
 * would read 0 as "to the end"). */
static PyObject *region_sync(HmrPyRegion *self, PyObject *args, PyObject *kwargs)
{
	static char *names[] = {"direction", "offset", "length", NULL};
	PyObject *direction_obj = NULL, *offset_obj = NULL, *length_obj = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:sync", names, &direction_obj,
					 &offset_obj, &length_obj))
		return NULL;
	/* (not "K": it wraps a negative number round instead of refusing it) */
	unsigned long long direction, offset = 0;
	if (hmr_py_unsigned("MemoryRegion.sync", "direction", direction_obj, &direction) != 0 ||
	    (offset_obj && hmr_py_unsigned("MemoryRegion.sync", "offset", offset_obj, &offset) != 0))
		return NULL;
	size_t length = 0;
	if (length_obj != Py_None) {
		unsigned long long n;
		if (hmr_py_unsigned("MemoryRegion.sync", "length", length_obj, &n) != 0)
			return NULL;
		length = n > SIZE_MAX ? SIZE_MAX : (size_t)n;
	}
	/* After every number: reading one may run Python code (__index__) that closes this
	 * region, and nothing from here to the call lets go of the GIL. */
	hmr_mr *mr = open_mr(self, "MemoryRegion.sync");
	if (!mr)
		return NULL;
	if (direction != HMR_SYNC_TO_DEVICE && direction != HMR_SYNC_FROM_DEVICE)
		return hmr_py_raise_code(HMR_EINVAL, "MemoryRegion.sync",
					 "direction must be hmr.SYNC_TO_DEVICE or "
					 "hmr.SYNC_FROM_DEVICE, not %llu",
					 direction);
	if (offset > self->source.length ||
	    (length_obj != Py_None && length > self->source.length - offset))
		return hmr_py_raise_code(HMR_EINVAL, "MemoryRegion.sync",
					 "[%llu, +%zu) is not inside the region's %zu bytes", offset,
					 length, self->source.length);
	if (length_obj != Py_None && length == 0)
		Py_RETURN_NONE;
	HmrPyDomain *domain = self->domain;
	int rc;
	++domain->in_flight;
	++self->in_flight;
	Py_BEGIN_ALLOW_THREADS
	rc = hmr_mr_sync(mr, offset, length, direction);
	Py_END_ALLOW_THREADS
	--self->in_flight;
	--domain->in_flight;
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_mr_sync");
	Py_RETURN_NONE;
}

static PyObject *region_pack_rkey(HmrPyRegion *self, PyObject *unused)
{
	(void)unused;
	hmr_mr *mr = open_mr(self, "MemoryRegion.pack_rkey");
	if (!mr)
		return NULL;
	unsigned char blob[HMR_RKEY_PACKED_MAX];
	size_t length = sizeof blob;
	int rc = hmr_rkey_pack(mr, blob, &length);
	if (rc != 0)
		return hmr_py_raise(rc, "hmr_rkey_pack");
	return PyBytes_FromStringAndSize((const char *)blob, (Py_ssize_t)length);
}

static PyObject *region_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return region_close(self, NULL);
}

static PyObject *region_repr(HmrPyRegion *self)
{
	if (!self->mr)
		return PyUnicode_FromString("<hmr.MemoryRegion closed>");
	return PyUnicode_FromFormat("<hmr.MemoryRegion address=%p length=%zu>",
				    self->source.address, self->source.length);
}

static PyMethodDef region_methods[] = {
	{"close", region_close, METH_NOARGS,
	 "close()\n--\n\nDeregisters the region and lets go of the object; a second close does\n"
	 "nothing."},
	{"pack_rkey", (PyCFunction)region_pack_rkey, METH_NOARGS,
	 "pack_rkey()\n--\n\nWhat a peer needs to reach this region, as bytes (hmr_rkey_pack):\n"
	 "give them to the peer's Domain.unpack_rkey."},
	{"sync", (PyCFunction)(void (*)(void))region_sync, METH_VARARGS | METH_KEYWORDS,
	 "sync(direction, offset=0, length=None)\n--\n\n"
	 "For a host-shadow region (path \"host_shadow\"): copies [offset, offset + length) of it\n"
	 "between the shadow the NIC reaches and the device memory (hmr_mr_sync).\n"
	 "hmr.SYNC_TO_DEVICE after the NIC wrote the shadow, hmr.SYNC_FROM_DEVICE before it\n"
	 "reads it.  length None: to the end.  For any other region there is nothing to copy\n"
	 "and it returns at once, so code may call it whatever the path."},
	{"__enter__", hmr_py_enter_self, METH_NOARGS, NULL},
	{"__exit__", region_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef region_getset[] = {
	{"key", (getter)get_key, NULL, "The 64-bit remote key (hmr_mr_key).", NULL},
	{"desc", (getter)get_desc, NULL, "The local descriptor as an int, or None.", NULL},
	{"address", (getter)get_address, NULL, "Address of the first registered byte.", NULL},
	{"length", (getter)get_length, NULL, "Registered bytes.", NULL},
	{"access", (getter)get_access, NULL, "The access bits it was registered with.", NULL},
	{"iface", (getter)get_iface, NULL,
	 "What the memory is: \"system\", \"cuda\", \"rocr\", \"ze\", \"neuron\", \"synapseai\".",
	 NULL},
	{"device", (getter)get_device, NULL, "The device (CUDA ordinal, ZE encoding, ...).", NULL},
	{"kind", (getter)get_kind, NULL,
	 "\"host\", \"host_alloc\", \"device_only\" or \"managed\".", NULL},
	{"path", (getter)get_path, NULL,
	 "How it reached the NIC: \"address\", \"dmabuf\", \"peer_direct\", \"host_shadow\".",
	 NULL},
	{"cached", (getter)get_cached, NULL, "True when it shares a cached registration.", NULL},
	{"shadow", (getter)get_shadow, NULL,
	 "For path \"host_shadow\": the address of the shadow's first byte (host memory the NIC\n"
	 "registered in the device memory's place); None otherwise.",
	 NULL},
	{"remote_address", (getter)get_remote_address, NULL,
	 "The address a peer targets for the first byte (hmr_mr_raw_attr's base): the shadow's\n"
	 "for a host shadow, else the region's address (0 for a domain without MR_VIRT_ADDR).",
	 NULL},
	{"closed", (getter)get_closed, NULL, "True once closed.", NULL},
	{"obj", (getter)get_obj, NULL, "The registered object (None once closed).", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyObject *region_no_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
	(void)type;
	(void)args;
	(void)kwargs;
	PyErr_SetString(PyExc_TypeError, "MemoryRegion objects come from Domain.register()");
	return NULL;
}

static PyType_Slot region_slots[] = {
	{Py_tp_doc, "A registered range of memory (Domain.register).  Keeps the registered "
		    "object alive until closed; a context manager."},
	{Py_tp_new, region_no_new},
	{Py_tp_dealloc, region_dealloc},
	{Py_tp_repr, region_repr},
	{Py_tp_methods, region_methods},
	{Py_tp_getset, region_getset},
	{0, NULL},
};

static PyType_Spec region_spec = {
	.name = "hmr.MemoryRegion",
	.basicsize = sizeof(HmrPyRegion),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = region_slots,
};

int hmr_py_region_init_type(PyObject *module)
{
	return hmr_py_add_type(module, &region_spec, "MemoryRegion", &hmr_py.region_type);
}
