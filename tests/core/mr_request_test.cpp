#include "registration/mr_request.h"

#include <gtest/gtest.h>

#include <array>

namespace hmr::core {
namespace {

class MrRequestTest : public ::testing::Test {
 protected:
  MrRequestTest() {
    attr_.size = sizeof attr_;
    segments_[0] = {buffer_.data(), 64};
    segments_[1] = {buffer_.data() + 128, 32};
    attr_.mr_iov = segments_.data();
    attr_.iov_count = 1;
    attr_.access = HMR_REMOTE_WRITE;
    rules_.iov_limit = 2;
  }
  std::array<uint8_t, 256> buffer_{};
  std::array<iovec, 2> segments_{};
  hmr_mr_attr attr_{};
  DomainRules rules_;
};

TEST_F(MrRequestTest, NormalisesAValidRequest) {
  attr_.iov_count = 2;
  attr_.requested_key = 77;
  Result<MrRequest> request = validate_mr_request(attr_, HMR_RMA_EVENT, rules_);
  ASSERT_TRUE(request.ok()) << request.status().reason();
  EXPECT_EQ(request->length(), 96u);
  EXPECT_EQ(request->segments.size(), 2u);
  ASSERT_TRUE(request->requested_key.has_value());
  EXPECT_EQ(*request->requested_key, 77u);
  EXPECT_EQ(request->flags, HMR_RMA_EVENT);
}

TEST_F(MrRequestTest, ProviderKeysDropTheRequestedKey) {
  rules_.mr_mode = HMR_MR_PROV_KEY;
  rules_.key_size = 1;
  attr_.requested_key = 1ULL << 40;  // would not fit, but is ignored
  Result<MrRequest> request = validate_mr_request(attr_, 0, rules_);
  ASSERT_TRUE(request.ok());
  EXPECT_FALSE(request->requested_key.has_value());
}

TEST_F(MrRequestTest, KeyWiderThanKeySizeIsRejected) {
  rules_.key_size = 2;
  attr_.requested_key = 0x10000;
  EXPECT_EQ(validate_mr_request(attr_, 0, rules_).status().code(), HMR_EKEYREJECTED);
  attr_.requested_key = 0xffff;
  EXPECT_TRUE(validate_mr_request(attr_, 0, rules_).ok());
}

TEST_F(MrRequestTest, ArgumentErrorsComeBeforeRuntimeAvailability) {
  // Validation checks the declaration's syntax only; whether the runtime serves the memory is
  // asked afterwards, when the memory is resolved (core/memory_resolution.h).
  attr_.iface = HMR_HMEM_CUDA;
  EXPECT_TRUE(validate_mr_request(attr_, 0, rules_).ok());
  attr_.offset = 1;
  EXPECT_EQ(validate_mr_request(attr_, 0, rules_).status().code(), HMR_EINVAL);
  attr_.offset = 0;
  EXPECT_EQ(validate_mr_request(attr_, HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC, rules_)
                .status()
                .code(),
            HMR_EBADFLAGS);
}

TEST_F(MrRequestTest, MaxMrSizeCountsAllSegments) {
  attr_.iov_count = 2;
  rules_.max_mr_size = 95;
  EXPECT_EQ(validate_mr_request(attr_, 0, rules_).status().code(), HMR_EINVAL);
  rules_.max_mr_size = 96;
  EXPECT_TRUE(validate_mr_request(attr_, 0, rules_).ok());
}

TEST_F(MrRequestTest, WrappingSegmentIsRejected) {
  segments_[0] = {reinterpret_cast<void*>(UINTPTR_MAX - 10), 64};
  EXPECT_EQ(validate_mr_request(attr_, 0, rules_).status().code(), HMR_EINVAL);
}

}  // namespace
}  // namespace hmr::core
