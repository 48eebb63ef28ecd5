#include "test_support.h"

namespace hmr_test {

hmr_domain* open_sim_domain(uint64_t app_mode, const char* nic_options,
                            hmr_domain_attr* attr_out) {
  hmr_domain_attr attr = domain_attr(app_mode, nic_options);
  hmr_domain* domain = nullptr;
  const int rc = hmr_domain_open(&attr, &domain);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  if (attr_out != nullptr) *attr_out = attr;
  return domain;
}

Pages::Pages(size_t bytes) : bytes_(bytes) {
  address_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (address_ == MAP_FAILED) address_ = nullptr;
  EXPECT_NE(address_, nullptr);
}

Pages::~Pages() { unmap(); }

void Pages::unmap() {
  if (address_ != nullptr) munmap(address_, bytes_);
  address_ = nullptr;
}

}  // namespace hmr_test
