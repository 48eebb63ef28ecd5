/* Opens a sim domain, registers one buffer, closes everything: the smallest complete use of an
 * installed hmr.  Built twice by run_install_test.sh: with find_package(hmr) and with pkg-config. */
#include <hmr/hmr.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(const char *call, int rc) {
	fprintf(stderr, "consumer: %s: %s (%s)\n", call, hmr_strerror(rc), hmr_last_error());
	return 1;
}

int main(void) {
	struct hmr_domain_attr attr;
	hmr_domain *domain = NULL;
	hmr_mr *mr = NULL;
	static char buffer[1 << 16];
	int rc;

	if ((hmr_version() >> 16) != HMR_VERSION_MAJOR) {
		fprintf(stderr, "consumer: header major %d, library %u\n", HMR_VERSION_MAJOR,
			(unsigned)(hmr_version() >> 16));
		return 1;
	}
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.nic = "sim";
	attr.mr_mode = HMR_MR_VIRT_ADDR | HMR_MR_PROV_KEY;
	rc = hmr_domain_open(&attr, &domain);
	if (rc < 0) return failed("hmr_domain_open", rc);
	rc = hmr_mr_reg(domain, buffer, sizeof buffer, HMR_REMOTE_READ | HMR_REMOTE_WRITE, 0, 1, 0,
			&mr, NULL);
	if (rc < 0) return failed("hmr_mr_reg", rc);
	if (hmr_mr_desc(mr) == NULL) {
		fprintf(stderr, "consumer: registered MR has no descriptor\n");
		return 1;
	}
	rc = hmr_mr_close(mr);
	if (rc < 0) return failed("hmr_mr_close", rc);
	rc = hmr_domain_close(domain);
	if (rc < 0) return failed("hmr_domain_close", rc);
	printf("consumer: hmr %u.%u.%u: opened a sim domain, registered %zu bytes, closed: ok\n",
	       (unsigned)(hmr_version() >> 16), (unsigned)((hmr_version() >> 8) & 0xff),
	       (unsigned)(hmr_version() & 0xff), sizeof buffer);
	return 0;
}
