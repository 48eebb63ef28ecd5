#include "ofi_test_fabric.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace hmr_ofi_test {
namespace {

bool matches(const char* name, const char* wanted) {
  return wanted == nullptr || (name != nullptr && std::strcmp(name, wanted) == 0);
}

}  // namespace

ProviderChoice tcp_loopback() { return {"tcp", "lo", "127.0.0.1/32", 0}; }
ProviderChoice shm_choice(uint64_t mode_hints) { return {"shm", nullptr, nullptr, mode_hints}; }

void FidCloser::operator()(fid* object) const {
  if (object != nullptr) {
    EXPECT_EQ(fi_close(object), 0);
  }
}

InfoPtr find_info(const ProviderChoice& choice) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) {
    ADD_FAILURE() << "fi_allocinfo failed";
    return nullptr;
  }
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA;
  hints->domain_attr->mr_mode = static_cast<int>(choice.mode_hints);
  hints->domain_attr->threading = FI_THREAD_SAFE;
  // A write completes once the bytes are in the target's memory (or the target refused
  // them), so a test can check the memory right after the completion.
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->fabric_attr->prov_name = strdup(choice.provider);
  fi_info* list = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &list);
  InfoPtr answers(list);
  if (rc != 0) {
    ADD_FAILURE() << "fi_getinfo(" << choice.provider << "): " << fi_strerror(-rc);
    return nullptr;
  }
  for (fi_info* info = list; info != nullptr; info = info->next) {
    if (matches(info->domain_attr->name, choice.domain_name) &&
        matches(info->fabric_attr->name, choice.fabric_name)) {
      return InfoPtr(fi_dupinfo(info));
    }
  }
  ADD_FAILURE() << "fi_getinfo(" << choice.provider << ") has no domain "
                << (choice.domain_name ? choice.domain_name : "?");
  return nullptr;
}

AppDomain::AppDomain(const ProviderChoice& choice, fi_threading threading)
    : info_(find_info(choice)) {
  if (!info_) return;
  info_->domain_attr->threading = threading;
  int rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
  if (rc != 0) {
    ADD_FAILURE() << "fi_fabric: " << fi_strerror(-rc);
    return;
  }
  rc = fi_domain(fabric_, info_.get(), &domain_, nullptr);
  if (rc != 0) {
    ADD_FAILURE() << "fi_domain: " << fi_strerror(-rc);
    domain_ = nullptr;
  }
}

AppDomain::~AppDomain() {
  if (domain_ != nullptr) {
    EXPECT_EQ(fi_close(&domain_->fid), 0) << "MRs left on the domain?";
  }
  if (fabric_ != nullptr) {
    EXPECT_EQ(fi_close(&fabric_->fid), 0);
  }
}

std::string AppDomain::wrap_options() const {
  char text[160];
  std::snprintf(text, sizeof text, "provider=%s;mr_mode=%#x;threading=%d",
                info_->fabric_attr->prov_name, static_cast<unsigned>(info_->domain_attr->mr_mode),
                static_cast<int>(info_->domain_attr->threading));
  return text;
}

EndpointPair::EndpointPair(fid_domain* domain, const fi_info* info) {
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  int rc = fi_av_open(domain, &av_attr, &av_, nullptr);
  if (rc != 0) {
    ADD_FAILURE() << "fi_av_open: " << fi_strerror(-rc);
    av_ = nullptr;
    return;
  }
  ready_ = open_side(domain, info, target_) && open_side(domain, info, initiator_);
}

bool EndpointPair::open_side(fid_domain* domain, const fi_info* info, Side& side) {
  int rc = fi_endpoint(domain, const_cast<fi_info*>(info), &side.ep, nullptr);
  if (rc != 0) {
    ADD_FAILURE() << "fi_endpoint: " << fi_strerror(-rc);
    side.ep = nullptr;
    return false;
  }
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = 64;
  cq_attr.wait_obj = FI_WAIT_NONE;
  rc = fi_cq_open(domain, &cq_attr, &side.cq, nullptr);
  if (rc != 0) {
    ADD_FAILURE() << "fi_cq_open: " << fi_strerror(-rc);
    side.cq = nullptr;
    return false;
  }
  if ((rc = fi_ep_bind(side.ep, &side.cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
      (rc = fi_ep_bind(side.ep, &av_->fid, 0)) != 0 || (rc = fi_enable(side.ep)) != 0) {
    ADD_FAILURE() << "binding or enabling an endpoint: " << fi_strerror(-rc);
    return false;
  }
  char name[256];
  size_t length = sizeof name;
  if ((rc = fi_getname(&side.ep->fid, name, &length)) != 0) {
    ADD_FAILURE() << "fi_getname: " << fi_strerror(-rc);
    return false;
  }
  if (fi_av_insert(av_, name, 1, &side.address, 0, nullptr) != 1) {
    ADD_FAILURE() << "fi_av_insert failed";
    return false;
  }
  return true;
}

EndpointPair::~EndpointPair() {
  for (Side* side : {&initiator_, &target_}) {
    if (side->ep != nullptr) {
      EXPECT_EQ(fi_close(&side->ep->fid), 0);
    }
    if (side->cq != nullptr) {
      EXPECT_EQ(fi_close(&side->cq->fid), 0);
    }
  }
  if (av_ != nullptr) {
    EXPECT_EQ(fi_close(&av_->fid), 0);
  }
}

int EndpointPair::write(const void* buf, size_t len, void* desc, uint64_t addr, uint64_t key,
                        std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + kDeadline;
  ssize_t posted;
  while ((posted = fi_write(initiator_.ep, buf, len, desc, target_.address, addr, key,
                            nullptr)) == -FI_EAGAIN &&
         std::chrono::steady_clock::now() < end) {
    fi_cq_entry entry;
    (void)fi_cq_read(initiator_.cq, &entry, 1);
    (void)fi_cq_read(target_.cq, &entry, 1);
  }
  return wait_for_completion(posted, deadline);
}

int EndpointPair::read(void* buf, size_t len, void* desc, uint64_t addr, uint64_t key) {
  const auto end = std::chrono::steady_clock::now() + kDeadline;
  ssize_t posted;
  while ((posted = fi_read(initiator_.ep, buf, len, desc, target_.address, addr, key,
                           nullptr)) == -FI_EAGAIN &&
         std::chrono::steady_clock::now() < end) {
    fi_cq_entry entry;
    (void)fi_cq_read(initiator_.cq, &entry, 1);
    (void)fi_cq_read(target_.cq, &entry, 1);
  }
  return wait_for_completion(posted, kDeadline);
}

int EndpointPair::wait_for_completion(ssize_t posted, std::chrono::milliseconds deadline) {
  if (posted != 0) {
    last_error_ = std::string("posting failed: ") + fi_strerror(static_cast<int>(-posted));
    return static_cast<int>(posted);
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    fi_cq_entry entry;
    ssize_t rc = fi_cq_read(initiator_.cq, &entry, 1);
    if (rc == 1) return 0;
    if (rc == -FI_EAVAIL) {
      fi_cq_err_entry error{};
      (void)fi_cq_readerr(initiator_.cq, &error, 0);
      last_error_ = std::string("completion error: ") + fi_strerror(error.err);
      return -error.err;
    }
    if (rc != -FI_EAGAIN) {
      last_error_ = std::string("fi_cq_read: ") + fi_strerror(static_cast<int>(-rc));
      return static_cast<int>(rc);
    }
    // The target progresses only when its queue is polled (manual progress).  Some
    // providers (shm) report a refused operation only there, and the initiator never
    // completes it.
    rc = fi_cq_read(target_.cq, &entry, 1);
    if (rc == -FI_EAVAIL) {
      fi_cq_err_entry error{};
      (void)fi_cq_readerr(target_.cq, &error, 0);
      last_error_ = std::string("target completion error: ") + fi_strerror(error.err);
      return -error.err;
    }
  }
  last_error_ = "no completion within the deadline";
  return -FI_ETIMEDOUT;
}

}  // namespace hmr_ofi_test
