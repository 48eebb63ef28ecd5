/*
 * The C side of the Python package hmr: one extension (_hmr) built against CPython's limited
 * API of 3.11, so one binary (_hmr.abi3.so) serves 3.11 and every later CPython.  3.11 is the
 * first limited API with the buffer protocol (Py_buffer, PyObject_GetBuffer).
 *
 * Everything here runs with the GIL held unless a block says Py_BEGIN_ALLOW_THREADS; the GIL
 * is what makes the objects below thread safe (the open-children lists, the hint table, the
 * closed flags).  docs/python.md, "Threads, the GIL and fork".
 */
#ifndef HMR_PY_H
#define HMR_PY_H

#ifndef Py_LIMITED_API
#error "build _hmr with Py_LIMITED_API=0x030B0000 (setup.py and python/CMakeLists.txt do)"
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <hmr/hmr.h>
#include <stdint.h>
#include <sys/types.h>

#include "dlpack.h"

/* Every object a domain hands out (regions, remote keys, endpoints) is on its domain's list of
 * open children, so Domain.close() can close them first (hmr_domain_close refuses while any is
 * open).  Intrusive and doubly linked: linking and unlinking cost four stores. */
typedef struct HmrPyLink {
	struct HmrPyLink *prev, *next;
} HmrPyLink;

/* Registrations the domain has made and its cache kept, by address, length and access (the
 * cache's key: the same range with another access is another entry): a hint that
 * a registration will be a cache hit, which is then made with the GIL held (releasing and retaking it costs more
 * than the hit, and under contention it can wait a whole switch interval).  An unseen range
 * is probably a miss, which may block: that one runs without the GIL.  A hint is trusted
 * only once a registration of the range found the entry the one before it made (the same
 * key) as quickly as a hit, and no longer once a hinted one got another key or took longer
 * (a miss).  A wrong hint costs only that choice, never correctness. */
#define HMR_PY_HINT_SLOTS 512
typedef struct {
	uintptr_t address;
	size_t length;
	uint64_t access; /* part of the cache's key: another access is another entry */
	uint64_t key;    /* the key the last registration of the range got */
	int trusted;     /* the last registration found the entry before it, quickly: the next
			  * is made with the GIL held */
} HmrPyHint;

typedef struct {
	PyObject_HEAD
	hmr_domain *handle;      /* NULL once closed */
	HmrPyLink children;      /* sentinel of the open regions, remote keys and endpoints */
	Py_ssize_t in_flight;    /* calls into this domain running without the GIL */
	int closing;             /* Domain.close is closing the children: no call starts */
	pid_t pid;               /* the process that opened it (fork: see Domain.close) */
	uint64_t mr_mode;        /* negotiated */
	size_t key_size;
	PyObject *nic;           /* str */
	PyObject *cache_monitor; /* str: the monitor in use */
	HmrPyHint hints[HMR_PY_HINT_SLOTS];
} HmrPyDomain;

enum hmr_py_child_kind { HMR_PY_REGION, HMR_PY_REMOTE_KEY, HMR_PY_ENDPOINT };

/* The first fields of every child object. */
#define HMR_PY_CHILD_HEAD \
	PyObject_HEAD \
	HmrPyLink link; \
	int kind; \
	HmrPyDomain *domain; /* strong reference; the domain outlives its children */

typedef struct {
	HMR_PY_CHILD_HEAD
} HmrPyChild;

/* Where an object's memory is and what keeps it valid (source.c). */
enum hmr_py_source_kind {
	HMR_PY_SOURCE_NONE = 0,
	HMR_PY_SOURCE_BUFFER,  /* view holds a buffer export (and a reference to the object) */
	HMR_PY_SOURCE_DLPACK,  /* owner is the object, dl (or dl_versioned) the consumed tensor */
	HMR_PY_SOURCE_OBJECT,  /* owner is the object (torch's data_ptr route, CUDA array
	                        * interface, hmr.Pointer's keepalive) */
};
typedef struct {
	int kind;
	int readonly;
	int copied;         /* a DLPack 1.x export of a copy: what the NIC writes there is lost */
	int device_memory;  /* the producer said it is not CPU memory (may block longer) */
	void *address;
	size_t length;
	PyObject *owner;
	DLManagedTensor *dl;                     /* (one of these two, for a DLPACK source) */
	DLManagedTensorVersioned *dl_versioned;
	Py_buffer view;
} HmrPySource;

/* Fills *source with obj's memory (write: the caller will let it be written); 0, or -1 with
 * an hmr.Error raised that says why not. */
int hmr_py_source_get(PyObject *obj, int write, HmrPySource *source);
/* Gives back what get took (buffer export, DLPack tensor, reference).  Idempotent. */
void hmr_py_source_release(HmrPySource *source);
/* Narrows a source to [offset, offset + length) of it (length < 0: to its end). */
int hmr_py_source_narrow(HmrPySource *source, unsigned long long offset, PyObject *length);

/* Module state the C types share, filled at import (module.c). */
typedef struct {
	PyObject *error;             /* hmr.Error */
	PyObject *error_for_code;    /* dict: positive code -> subclass of hmr.Error */
	PyObject *closed_error;      /* hmr.ClosedError */
	PyObject *pointer_type;      /* hmr.Pointer */
	PyObject *memory_info_type;  /* hmr.MemoryInfo */
	PyObject *cuda_array_interface; /* hmr._sources.cuda_array_interface */
	PyObject *torch_tensor_type; /* torch.Tensor once torch is imported, else NULL */
	int torch_has_nbytes;
	/* torch.Tensor's own methods, taken from the type once: an exact torch.Tensor is asked
	 * through them, with no attribute lookup and no bound method made per question. */
	PyObject *torch_is_contiguous, *torch_is_conj, *torch_is_neg, *torch_data_ptr, *torch_numel,
		*torch_element_size;
	PyTypeObject *domain_type;
	PyTypeObject *region_type;
	PyTypeObject *remote_key_type;
	PyTypeObject *endpoint_type;
	/* Interned names, compared by pointer first. */
	PyObject *s_access, *s_offset, *s_length, *s_dlpack, *s_cuda_array_interface, *s_data_ptr,
		*s_nbytes, *s_numel, *s_element_size, *s_is_contiguous, *s_is_conj, *s_is_neg,
		*s_address, *s_keepalive, *s_torch, *s_tensor;
} HmrPyState;
extern HmrPyState hmr_py;

/* errors.c: raise hmr.Error (or the subclass for the code) for a negative HMR_E* return,
 * with hmr_last_error()'s reason; `what` names the call.  Returns NULL. */
/* An unsigned 64-bit number (`name` in `what`'s error): any integer or __index__ object;
 * negative or over 64 bits raises hmr.InvalidArgumentError (numbers.c).  0, or -1 raised. */
int hmr_py_unsigned(const char *what, const char *name, PyObject *value, unsigned long long *out);
/* 0 in the main interpreter; else -1 with ImportError raised (module.c). */
int hmr_py_main_interpreter_only(const char *what);
PyObject *hmr_py_raise(int rc, const char *what);
/* The same for an error found here: code is a positive HMR_E* number. */
PyObject *hmr_py_raise_code(int code, const char *what, const char *format, ...)
	__attribute__((format(printf, 3, 4)));
PyObject *hmr_py_raise_closed(const char *what);
/* ClosedError for a call on a child while Domain.close closes the children (a DLPack deleter
 * or a finaliser it runs, or another thread meanwhile): no call into the domain starts. */
PyObject *hmr_py_raise_domain_closing(const char *what);
/* The Python error set now (an object's own method failed) as hmr.Error `code`, its reason
 * "<context>: <type>: <message>" and the original as __cause__.  Returns NULL. */
PyObject *hmr_py_raise_from_current(int code, const char *what, const char *context);
/* This process's id, kept by a fork handler (no system call per check), and ClosedError for
 * an object of a domain the parent process opened before fork(): the C ABI refuses a forked
 * child its parent's objects, and the package answers its own cached facts the same way. */
extern pid_t hmr_py_this_process;
PyObject *hmr_py_raise_inherited(const char *what);

/* Names of enum hmr_hmem_iface and enum hmr_mem_kind values ("system", "host", ...). */
const char *hmr_py_iface_name(int iface);
const char *hmr_py_kind_name(int kind);

/* Type specs and the calls the types make on each other. */
int hmr_py_domain_init_type(PyObject *module);
int hmr_py_region_init_type(PyObject *module);
int hmr_py_remote_key_init_type(PyObject *module);
int hmr_py_endpoint_init_type(PyObject *module);
void hmr_py_link_child(HmrPyDomain *domain, HmrPyChild *child);
void hmr_py_unlink_child(HmrPyChild *child);
/* A dealloc's close of a child: a failure is reported as unraisable, and an exception
 * already on its way is left as it was. */
void hmr_py_close_in_dealloc(PyObject *child, int (*close)(PyObject *));
/* The end of every child's dealloc, once it is closed: unlinked, its domain let go, freed. */
void hmr_py_child_free(HmrPyChild *child);
PyObject *hmr_py_region_new(HmrPyDomain *domain, PyObject *const *args, Py_ssize_t nargs,
			    PyObject *kwnames);
/* Closes a child (region, remote key, endpoint): 0 or -1 with an exception. */
int hmr_py_region_close(PyObject *region);
int hmr_py_remote_key_close(PyObject *rkey);
int hmr_py_endpoint_close(PyObject *endpoint);
/* Whether another thread (or a dealloc) is inside the endpoint's close, without the GIL. */
int hmr_py_endpoint_closing(PyObject *endpoint);
/* A region whose close (a NIC deregistration) runs without the GIL on another thread. */
int hmr_py_region_closing(PyObject *obj);
PyObject *hmr_py_remote_key_new(HmrPyDomain *domain, PyObject *blob);
PyObject *hmr_py_endpoint_new(HmrPyDomain *domain);
/* For Endpoint.write/read: the MR behind a region object (its descriptor), or NULL. */
hmr_mr *hmr_py_region_mr(PyObject *obj);
/* Whether a MemoryRegion belongs to a domain the parent process opened before fork(). */
int hmr_py_region_inherited(PyObject *obj);
/* A MemoryRegion in use without the GIL (+1 before, -1 after): its close() refuses meanwhile. */
void hmr_py_region_hold(PyObject *region, int delta);
/* The domain, checked open; NULL with hmr.ClosedError raised. */
hmr_domain *hmr_py_domain_handle(HmrPyDomain *domain, const char *what);
/* Makes the type of `spec`, keeps it in *type and adds it to `module` as `name`: 0, or -1
 * with an exception. */
int hmr_py_add_type(PyObject *module, PyType_Spec *spec, const char *name, PyTypeObject **type);
/* __enter__ of every context manager here: the object itself. */
PyObject *hmr_py_enter_self(PyObject *self, PyObject *unused);

#endif
