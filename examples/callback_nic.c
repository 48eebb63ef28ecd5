/* hmr under a transport that keeps its own NIC code (nic = "callback").
 *
 * A transport with its own verbs protection domain or libfabric domain still wants hmr's
 * pointer detection, dma-buf export decision, registration cache and its invalidation.  It
 * hands hmr three functions; hmr calls them when a registration really has to reach the NIC.
 * Here the "NIC" only prints what it is asked and hands out counter keys — put ibv_reg_mr /
 * ibv_reg_dmabuf_mr / ibv_dereg_mr (or fi_mr_regattr / fi_close) in their place.
 *
 * Build: cc callback_nic.c $(pkg-config --cflags --libs hmr)
 */
#include <hmr/hmr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct my_nic {
	unsigned next_key;
	unsigned registrations;
	unsigned deregistrations;
};

static int my_reg_va(void *context, const struct hmr_nic_reg_request *request,
		     struct hmr_nic_mr *mr, char *reason, size_t reason_size)
{
	struct my_nic *nic = context;
	if (request->len > (1u << 30)) {
		snprintf(reason, reason_size, "my NIC registers at most 1 GiB at a time");
		return -HMR_EINVAL;
	}
	nic->registrations++;
	mr->handle = NULL; /* e.g. the struct ibv_mr * */
	mr->desc = NULL;   /* e.g. the lkey, for hmr_mr_desc() */
	mr->key = nic->next_key++;
	printf("  NIC: register %zu bytes at %p (iface %d) -> key %llu\n", request->len,
	       request->addr, (int)request->iface, (unsigned long long)mr->key);
	return 0;
}

static int my_dereg(void *context, const struct hmr_nic_mr *mr, char *reason, size_t reason_size)
{
	struct my_nic *nic = context;
	(void)reason;
	(void)reason_size;
	nic->deregistrations++;
	printf("  NIC: deregister key %llu\n", (unsigned long long)mr->key);
	return 0;
}

#define CHECK(call)                                                                  \
	do {                                                                         \
		int rc_ = (call);                                                    \
		if (rc_ != 0) {                                                      \
			fprintf(stderr, "%s: %s (%s)\n", #call, hmr_strerror(-rc_),   \
				hmr_last_error());                                   \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

int main(void)
{
	struct my_nic nic = {.next_key = 1};
	struct hmr_nic_callbacks callbacks;
	memset(&callbacks, 0, sizeof callbacks);
	callbacks.size = sizeof callbacks;
	callbacks.context = &nic;
	callbacks.key_size = 4; /* an rkey is 32 bits */
	callbacks.reg_va = my_reg_va;
	callbacks.dereg = my_dereg;

	struct hmr_domain_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.nic = "callback";
	attr.nic_handle = &callbacks;
	attr.mr_mode = HMR_MR_PROV_KEY | HMR_MR_VIRT_ADDR;
	hmr_domain *domain;
	CHECK(hmr_domain_open(&attr, &domain));
	printf("domain open: callback NIC, cache monitor %s\n", attr.cache_monitor);

	size_t len = 1 << 20;
	char *buffer = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buffer == MAP_FAILED) return 1;

	/* A transport registers the same buffers over and over (every send, every step). */
	for (int round = 0; round < 3; round++) {
		hmr_mr *mr;
		CHECK(hmr_mr_reg(domain, buffer, len, HMR_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
		printf("round %d: hmr_mr_reg -> key %llu\n", round, (unsigned long long)hmr_mr_key(mr));
		CHECK(hmr_mr_close(mr));
	}
	printf("the NIC saw %u registration(s) for 3 hmr_mr_reg calls\n", nic.registrations);

	/* Freeing the memory is seen by hmr's monitor: the cached registration is dropped and
	 * handed back to the NIC, so a new buffer at the same address is registered anew. */
	munmap(buffer, len);
	CHECK(hmr_domain_cache_flush(domain));
	printf("after munmap: the NIC saw %u deregistration(s)\n", nic.deregistrations);

	CHECK(hmr_domain_close(domain));
	return nic.registrations == 1 && nic.deregistrations == 1 ? 0 : 1;
}
