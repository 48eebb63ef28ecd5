/* The C-ABI figure beside the Python ones (bench_register.py compiles and runs it): a cached
 * hmr_mr_reg + hmr_mr_close of one 4 KiB host buffer on a sim domain, best of 5 rounds, in ns.
 *   usage: c_hit_loop [iterations]      prints one number */
#include <hmr/hmr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	long iterations = argc > 1 ? atol(argv[1]) : 2000000;
	struct hmr_domain_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.nic = "sim";
	attr.mr_mode = HMR_MR_LOCAL | HMR_MR_VIRT_ADDR | HMR_MR_ALLOCATED | HMR_MR_PROV_KEY;
	hmr_domain *domain;
	if (hmr_domain_open(&attr, &domain) != 0) {
		fprintf(stderr, "hmr_domain_open: %s\n", hmr_last_error());
		return 1;
	}
	static char buffer[4096] __attribute__((aligned(4096)));
	const uint64_t access = HMR_REMOTE_READ | HMR_REMOTE_WRITE;
	double best = 1e30;
	for (int round = 0; round < 5; ++round) {
		double start = now_ns();
		for (long i = 0; i < iterations; ++i) {
			hmr_mr *mr;
			if (hmr_mr_reg(domain, buffer, sizeof buffer, access, 0, 0, 0, &mr, NULL) != 0 ||
			    hmr_mr_close(mr) != 0) {
				fprintf(stderr, "hmr_mr_reg: %s\n", hmr_last_error());
				return 1;
			}
		}
		double ns = (now_ns() - start) / (double)iterations;
		if (ns < best)
			best = ns;
	}
	printf("%.1f\n", best);
	return hmr_domain_close(domain) == 0 ? 0 : 1;
}
