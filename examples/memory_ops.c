/* Memory operations beyond registration, on the software NIC ("sim"), which moves bytes in
 * this process so every step can be checked:
 *
 *   - re-registration: an MR moves to another buffer and takes a new key,
 *   - a memory window: a short-lived key onto part of an MR, revoked without touching the MR,
 *   - on-demand paging: nothing pinned; WILLNEED asks for the pages before the first access,
 *   - an indirect key: one key over parts of two MRs, so one write lands in both,
 *   - a packed remote key: what a peer receives to reach that indirect key.
 *
 * On an RDMA NIC the same calls map to ibv_rereg_mr, ibv_alloc_mw/ibv_bind_mw, IBV_ACCESS_ON_DEMAND
 * with ibv_advise_mr, and mlx5 UMR; hmr_md_query_op says which of them a domain has.
 *
 * Build: cc memory_ops.c $(pkg-config --cflags --libs hmr)
 */
#include <hmr/hmr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096

/* Every call is checked; the first failure ends the program with what failed and why. */
#define CHECK(call)                                                                  \
	do {                                                                         \
		int rc_ = (call);                                                    \
		if (rc_ != 0) {                                                      \
			fprintf(stderr, "FAILED %s: %s (%s)\n", #call,               \
				hmr_strerror(rc_), hmr_last_error());                \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

/* For calls that must be refused, and with exactly this code. */
#define CHECK_REFUSED(call, code)                                                    \
	do {                                                                         \
		int rc_ = (call);                                                    \
		if (rc_ != -(code)) {                                                \
			fprintf(stderr, "FAILED %s: expected %s, got %d (%s)\n",     \
				#call, hmr_strerror(code), rc_, hmr_last_error());   \
			exit(1);                                                     \
		}                                                                    \
		printf("  refused as expected: %s\n", hmr_last_error());             \
	} while (0)

static void check_bytes(const void *landed, const void *sent, size_t len, const char *what)
{
	if (memcmp(landed, sent, len) != 0) {
		fprintf(stderr, "FAILED: %s: the bytes did not land\n", what);
		exit(1);
	}
}

static void *pages(size_t count)
{
	void *memory = aligned_alloc(PAGE, count * PAGE);
	if (memory == NULL) {
		fprintf(stderr, "FAILED: out of memory\n");
		exit(1);
	}
	return memory;
}

static uint64_t address(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

static hmr_domain *open_sim_domain(void)
{
	struct hmr_domain_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.nic = "sim";
	/* Peers address memory by virtual address; the NIC chooses the keys. */
	attr.mr_mode = HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY;
	hmr_domain *domain;
	CHECK(hmr_domain_open(&attr, &domain));
	return domain;
}

static void rereg(hmr_domain *domain, hmr_ep *initiator)
{
	printf("re-registration\n");
	char *first = pages(1), *second = pages(1);
	hmr_mr *mr;
	CHECK(hmr_mr_reg(domain, first, PAGE, HMR_REMOTE_READ | HMR_REMOTE_WRITE, 0, 0, 0, &mr,
			 NULL));
	uint64_t old_key = hmr_mr_key(mr);

	struct iovec moved = {second, PAGE};
	struct hmr_mr_rereg_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.mr_iov = &moved;
	attr.iov_count = 1;
	CHECK(hmr_mr_rereg(mr, HMR_MR_REREG_TRANSLATION, &attr));
	uint64_t new_key = hmr_mr_key(mr); /* keys may change: read it again */
	printf("  key %#llx -> %#llx\n", (unsigned long long)old_key, (unsigned long long)new_key);

	const char message[] = "now in the second buffer";
	CHECK(hmr_ep_write(initiator, message, sizeof message, NULL, address(second) + 16,
			   new_key));
	check_bytes(second + 16, message, sizeof message, "write after re-registration");
	/* The MR no longer covers the first buffer. */
	CHECK_REFUSED(hmr_ep_write(initiator, message, sizeof message, NULL, address(first),
				   new_key),
		      HMR_EFAULT);
	CHECK(hmr_mr_close(mr));
	free(first);
	free(second);
}

static void memory_window(hmr_domain *domain, hmr_ep *initiator)
{
	printf("memory window\n");
	char *buffer = pages(2);
	hmr_mr *mr;
	CHECK(hmr_mr_reg(domain, buffer, 2 * PAGE,
			 HMR_REMOTE_READ | HMR_REMOTE_WRITE | HMR_MW_BIND, 0, 0, 0, &mr, NULL));
	hmr_mw *window;
	CHECK(hmr_mw_alloc(domain, HMR_MW_TYPE_2, &window));
	uint64_t window_key;
	/* The sim NIC completes the bind in the call: no queue to post it to. */
	CHECK(hmr_mw_bind(window, mr, buffer + PAGE, PAGE, HMR_REMOTE_WRITE, NULL, &window_key));
	printf("  window key %#llx onto the second page, write only\n",
	       (unsigned long long)window_key);

	const char message[] = "through the window";
	CHECK(hmr_ep_write(initiator, message, sizeof message, NULL, address(buffer + PAGE) + 8,
			   window_key));
	check_bytes(buffer + PAGE + 8, message, sizeof message, "write through the window");
	CHECK_REFUSED(hmr_ep_write(initiator, message, sizeof message, NULL, address(buffer),
				   window_key),
		      HMR_EFAULT);

	CHECK(hmr_mw_invalidate(window, NULL));
	CHECK_REFUSED(hmr_ep_write(initiator, message, sizeof message, NULL,
				   address(buffer + PAGE), window_key),
		      HMR_EACCES);
	CHECK(hmr_mw_close(window));
	CHECK(hmr_mr_close(mr));
	free(buffer);
}

static void on_demand_paging(hmr_domain *domain, hmr_ep *initiator)
{
	printf("on-demand paging\n");
	char reason[128];
	if (hmr_md_query_op(domain, HMR_MD_OP_ODP, reason, sizeof reason) != 1) {
		fprintf(stderr, "FAILED: the sim NIC should have ODP\n");
		exit(1);
	}
	char *buffer = pages(4); /* nothing of it is pinned: the NIC resolves pages as it goes */
	hmr_mr *mr;
	CHECK(hmr_mr_reg(domain, buffer, 4 * PAGE, HMR_REMOTE_READ | HMR_REMOTE_WRITE, 0, 0,
			 HMR_MR_ODP, &mr, NULL));
	CHECK(hmr_mem_advise(mr, buffer, 4 * PAGE, HMR_MADV_WILLNEED));
	const char message[] = "paged in on demand";
	CHECK(hmr_ep_write(initiator, message, sizeof message, NULL, address(buffer) + 3 * PAGE,
			   hmr_mr_key(mr)));
	check_bytes(buffer + 3 * PAGE, message, sizeof message, "write into an ODP MR");
	/* Said after the fact, like every step here: a line for what was done and checked. */
	printf("  4 pages registered unpinned (HMR_MR_ODP), advised WILLNEED; a write landed "
	       "in the last\n");
	CHECK(hmr_mr_close(mr));
	free(buffer);
}

/* Keeps the indirect key and its two MRs open for the packed-key step. */
struct indirect {
	char *first, *second;
	hmr_mr *first_mr, *second_mr, *key_mr;
};

static void indirect_key(hmr_domain *domain, hmr_ep *initiator, struct indirect *out)
{
	printf("indirect key\n");
	const uint64_t access = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
	out->first = pages(1);
	out->second = pages(1);
	memset(out->first, 0, PAGE);
	memset(out->second, 0, PAGE);
	CHECK(hmr_mr_reg(domain, out->first, PAGE, access, 0, 0, 0, &out->first_mr, NULL));
	CHECK(hmr_mr_reg(domain, out->second, PAGE, access, 0, 0, 0, &out->second_mr, NULL));
	/* Bytes 0..2047 of the key are the first buffer's second half, 2048..4095 the second
	 * buffer's first half. */
	struct hmr_mr_segment segments[2] = {
		{out->first_mr, out->first + PAGE / 2, PAGE / 2},
		{out->second_mr, out->second, PAGE / 2},
	};
	CHECK(hmr_mr_reg_indirect(domain, segments, 2, access, &out->key_mr));

	char message[64];
	for (size_t i = 0; i < sizeof message; i++) message[i] = (char)('A' + i % 26);
	/* Addresses of an indirect key start at 0, whatever the domain's addressing. */
	CHECK(hmr_ep_write(initiator, message, sizeof message, NULL, PAGE / 2 - 32,
			   hmr_mr_key(out->key_mr)));
	check_bytes(out->first + PAGE - 32, message, 32, "first half of the spanning write");
	check_bytes(out->second, message + 32, 32, "second half of the spanning write");
	printf("  one 64-byte write landed in two MRs\n");
}

static void close_indirect(struct indirect *keys)
{
	CHECK(hmr_mr_close(keys->key_mr)); /* first: it holds the other two */
	CHECK(hmr_mr_close(keys->first_mr));
	CHECK(hmr_mr_close(keys->second_mr));
	free(keys->first);
	free(keys->second);
}

/* A peer's view: the key arrives as bytes, is unpacked in the peer's own domain, and the
 * peer writes through what it says. */
static void packed_remote_key(hmr_ep *target, const struct indirect *keys)
{
	printf("packed remote key\n");
	uint8_t blob[HMR_RKEY_PACKED_MAX];
	size_t blob_len = sizeof blob;
	CHECK(hmr_rkey_pack(keys->key_mr, blob, &blob_len));
	printf("  %zu bytes to send to the peer\n", blob_len);

	hmr_domain *peer = open_sim_domain();
	hmr_ep *peer_ep;
	CHECK(hmr_ep_open(peer, NULL, &peer_ep));
	CHECK(hmr_ep_connect(peer_ep, target));
	hmr_rkey *rkey;
	CHECK(hmr_rkey_unpack(peer, blob, blob_len, &rkey));
	struct hmr_rkey_info info;
	memset(&info, 0, sizeof info);
	info.size = sizeof info;
	CHECK(hmr_rkey_query(rkey, &info));
	printf("  remote range [%#llx, +%llu), key %#llx\n", (unsigned long long)info.addr,
	       (unsigned long long)info.length, (unsigned long long)info.key);
	if (info.addr != 0 || info.length != PAGE) {
		fprintf(stderr, "FAILED: the unpacked key names the wrong range\n");
		exit(1);
	}
	const char message[] = "from the peer";
	CHECK(hmr_ep_write(peer_ep, message, sizeof message, NULL, info.addr + PAGE / 2 - 4,
			   info.key));
	check_bytes(keys->first + PAGE - 4, message, 4, "peer write, first MR");
	check_bytes(keys->second, message + 4, sizeof message - 4, "peer write, second MR");
	CHECK(hmr_rkey_release(rkey));
	CHECK(hmr_ep_close(peer_ep));
	CHECK(hmr_domain_close(peer));
}

int main(void)
{
	hmr_domain *domain = open_sim_domain();
	hmr_ep *target, *initiator;
	CHECK(hmr_ep_open(domain, NULL, &target));
	CHECK(hmr_ep_open(domain, NULL, &initiator));
	CHECK(hmr_ep_connect(initiator, target));

	rereg(domain, initiator);
	memory_window(domain, initiator);
	on_demand_paging(domain, initiator);
	struct indirect keys;
	indirect_key(domain, initiator, &keys);
	packed_remote_key(target, &keys);
	close_indirect(&keys);

	CHECK(hmr_ep_close(initiator));
	CHECK(hmr_ep_close(target));
	CHECK(hmr_domain_close(domain));
	printf("every memory operation worked\n");
	return 0;
}
