// Bad arguments to every function of the public C ABI.  Each call must fail with the code
// docs/semantics.md names, leave a reason in hmr_last_error(), and write none of its outputs
// (outputs are pre-set to sentinels and compared afterwards).  Where the doc names no code,
// the expectation follows the nearest rule it does state and says so: non-zero "must be 0"
// flags give -HMR_EBADFLAGS (as for hmr_mr_raw_attr, and as hmr.h defines HMR_EBADFLAGS), a
// NULL output pointer gives -HMR_EINVAL (as for hmr_mr_reg*).
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../scoped_env.h"
#include "test_support.h"

namespace {

using hmr_test::domain_attr;
using hmr_test::open_sim_domain;
using hmr_test::Pages;
using hmr_test::ScopedEnv;

constexpr size_t kPage = 4096;
constexpr uint64_t kAllAccess = HMR_READ | HMR_WRITE | HMR_SEND | HMR_RECV | HMR_REMOTE_READ |
                                HMR_REMOTE_WRITE;

// A pointer no successful call could produce; used to prove an output was not written.
template <typename T>
T* sentinel() {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(0x1));
}

// Requested keys must be distinct within a domain without PROV_KEY; every registration in
// this binary takes a fresh one so no test fails with ENOKEY by accident.
uint64_t next_key() {
  static uint64_t key = 0x1000;
  return ++key;
}

// Stores an int into an enum field without forming an out-of-range enum value in this
// translation unit (that would be undefined behaviour, and UBSan's enum check would trip).
template <typename Enum>
void store_enum(Enum& field, int value) {
  static_assert(sizeof(Enum) == sizeof(int));
  std::memcpy(&field, &value, sizeof value);
}

// Owns an hmr object and closes it when the test ends, whatever happened before.
template <auto Close, typename T>
class Owned {
 public:
  explicit Owned(T* object = nullptr) : object_(object) {}
  ~Owned() {
    if (object_ != nullptr && object_ != sentinel<T>()) (void)Close(object_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T* get() const { return object_; }
  operator T*() const { return object_; }  // NOLINT(google-explicit-constructor)
  T** out() { return &object_; }
  T* release() {
    T* object = object_;
    object_ = nullptr;
    return object;
  }

 private:
  T* object_;
};
using Domain = Owned<hmr_domain_close, hmr_domain>;
using Mr = Owned<hmr_mr_close, hmr_mr>;
using Eq = Owned<hmr_eq_close, hmr_eq>;
using Cntr = Owned<hmr_cntr_close, hmr_cntr>;
using Ep = Owned<hmr_ep_close, hmr_ep>;

// Runs a registration `reg(hmr_mr** out)`, expects -code, a reason and *out untouched.  An
// unexpected success is closed again so that the test itself does not leak.
template <typename Reg>
void expect_reg_error(int code, Reg&& reg, const char* what) {
  hmr_mr* mr = sentinel<hmr_mr>();
  const int rc = reg(&mr);
  EXPECT_EQ(rc, -code) << what << ": " << hmr_last_error();
  if (rc < 0) {
    EXPECT_STRNE(hmr_last_error(), "") << what;
    EXPECT_EQ(mr, sentinel<hmr_mr>()) << what << ": *mr written on failure";
  } else if (mr != sentinel<hmr_mr>() && mr != nullptr) {
    (void)hmr_mr_close(mr);
  }
}
// `call` names the output `mr_out`.
#define EXPECT_REG_ERROR(code, call)                                             \
  do {                                                                           \
    SCOPED_TRACE(#call);                                                         \
    expect_reg_error((code), [&](hmr_mr** mr_out) { return (call); }, #call);    \
  } while (0)
#define EXPECT_REGATTR_ERROR(code, domain, attr_ptr, flags) \
  EXPECT_REG_ERROR(code, hmr_mr_regattr((domain), (attr_ptr), (flags), mr_out))

// hmr_domain_open must fail with -code and leave both *domain and *attr as they were.
void expect_open_error(int code, hmr_domain_attr* attr, const char* what) {
  hmr_domain_attr before;
  if (attr != nullptr) std::memcpy(&before, attr, sizeof before);
  hmr_domain* domain = sentinel<hmr_domain>();
  const int rc = hmr_domain_open(attr, &domain);
  EXPECT_EQ(rc, -code) << what << ": " << hmr_last_error();
  if (rc < 0) {
    EXPECT_STRNE(hmr_last_error(), "") << what;
    EXPECT_EQ(domain, sentinel<hmr_domain>()) << what << ": *domain written on failure";
    if (attr != nullptr) {
      EXPECT_EQ(std::memcmp(&before, attr, sizeof before), 0) << what
                                                               << ": attr written on failure";
    }
  } else if (domain != sentinel<hmr_domain>() && domain != nullptr) {
    (void)hmr_domain_close(domain);
  }
}
#define EXPECT_OPEN_ERROR(code, attr_ptr, what) \
  do {                                          \
    SCOPED_TRACE(what);                         \
    expect_open_error((code), (attr_ptr), what); \
  } while (0)

hmr_mr_attr host_attr(const iovec* iov, size_t count, uint64_t access = kAllAccess) {
  hmr_mr_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.requested_key = next_key();
  attr.iface = HMR_HMEM_SYSTEM;
  return attr;
}

// Registers [buf, buf+len) or fails the test (returns NULL then).
hmr_mr* reg_ok(hmr_domain* domain, void* buf, size_t len, uint64_t access = kAllAccess,
               uint64_t flags = 0) {
  hmr_mr* mr = nullptr;
  const int rc =
      hmr_mr_reg(domain, buf, len, access, 0, next_key(), flags, &mr, nullptr);
  EXPECT_EQ(rc, 0) << hmr_last_error();
  return rc == 0 ? mr : nullptr;
}

// The negotiated attributes of a sim domain opened with (mode, options).
hmr_domain_attr negotiated(uint64_t mode, const char* options = nullptr) {
  hmr_domain_attr attr = domain_attr(0);
  Domain domain(open_sim_domain(mode, options, &attr));
  EXPECT_NE(domain.get(), nullptr);
  return attr;
}

// Whether a vendor runtime may be loadable here (then "not available" cannot be tested).
bool runtime_may_be_present(hmr_hmem_iface iface) {
  struct Runtime {
    hmr_hmem_iface iface;
    const char* override_env;
    const char* library;
  };
  static const Runtime kRuntimes[] = {
      {HMR_HMEM_CUDA, "HMR_CUDA_LIBRARY", "libcuda.so.1"},
      {HMR_HMEM_ROCR, "HMR_ROCR_LIBRARY", "libhsa-runtime64.so.1"},
      {HMR_HMEM_ZE, "HMR_ZE_LIBRARY", "libze_loader.so.1"},
      {HMR_HMEM_NEURON, "HMR_NEURON_LIBRARY", "libnrt.so.1"},
      {HMR_HMEM_SYNAPSEAI, "HMR_SYNAPSEAI_LIBRARY", "libSynapse.so"},
  };
  for (const Runtime& runtime : kRuntimes) {
    if (runtime.iface != iface) continue;
    if (std::getenv(runtime.override_env) != nullptr) return true;
    void* handle = dlopen(runtime.library, RTLD_LAZY | RTLD_LOCAL);
    if (handle != nullptr) {
      dlclose(handle);
      return true;
    }
    return false;
  }
  return false;
}

// ============================================================== hmr_domain_open ==========

TEST(BadArgsDomainOpen, NullArguments) {
  EXPECT_OPEN_ERROR(HMR_EINVAL, nullptr, "attr NULL");

  hmr_domain_attr attr = domain_attr(0);
  const hmr_domain_attr before = attr;
  EXPECT_HMR_ERROR(hmr_domain_open(&attr, nullptr), HMR_EINVAL);
  EXPECT_EQ(std::memcmp(&before, &attr, sizeof attr), 0) << "attr written on failure";
}

TEST(BadArgsDomainOpen, AttrSize) {
  hmr_domain_attr attr = domain_attr(0);
  attr.size = 0;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "size 0");
  attr.size = 1;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "size 1");
  attr.size = sizeof(size_t);
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "size covers only the size field");
  attr.size = offsetof(hmr_domain_attr, threading);
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "size without the last field");
  attr.size = sizeof(hmr_domain_attr) - 1;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "size one byte short");
}

TEST(BadArgsDomainOpen, AttrLargerThanKnown) {
  struct Bigger {
    hmr_domain_attr a;
    uint64_t extra;
  };
  Bigger big;
  std::memset(&big, 0, sizeof big);
  big.a = domain_attr(0);
  big.a.size = sizeof big;
  big.extra = 1;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &big.a, "larger size, non-zero tail");

  big.extra = 0;
  Domain domain;
  ASSERT_HMR_OK(hmr_domain_open(&big.a, domain.out()));
  EXPECT_NE(domain.get(), nullptr);
  EXPECT_EQ(big.extra, 0u) << "hmr wrote beyond the struct it knows";
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsDomainOpen, UnknownNic) {
  hmr_domain_attr attr = domain_attr(0);
  attr.nic = "no-such-nic";
  EXPECT_OPEN_ERROR(HMR_ENODEV, &attr, "unknown nic");
  attr.nic = "";
  EXPECT_OPEN_ERROR(HMR_ENODEV, &attr, "empty nic name");
  attr.nic = "SIM ";
  EXPECT_OPEN_ERROR(HMR_ENODEV, &attr, "nic 'SIM '");
}

TEST(BadArgsDomainOpen, BadNicOptions) {
  const char* const kBad[] = {
      "bogus=1",                // unknown name
      "key_size",               // not name=value
      "=4",                     // empty name
      "key_size=abc",           // bad number
      "iov_limit=4x",           // trailing garbage
      "mr_cnt=-1",              // negative
      "require=NOT_A_BIT",      // unknown mode name
      "require=VIRT_ADDR|NOPE", // one unknown mode name among good ones
      "key_size=4;bogus=2",     // a bad item after a good one
  };
  for (const char* options : kBad) {
    hmr_domain_attr attr = domain_attr(0, options);
    EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, options);
  }
}

TEST(BadArgsDomainOpen, BadMrMode) {
  const uint64_t kBad[] = {
      1ULL << 12,                            // first bit above COLLECTIVE
      1ULL << 63,
      HMR_MR_VIRT_ADDR | (1ULL << 40),
      HMR_MR_BASIC | HMR_MR_SCALABLE,
      HMR_MR_BASIC | HMR_MR_SCALABLE | HMR_MR_LOCAL,
  };
  for (const uint64_t mode : kBad) {
    hmr_domain_attr attr = domain_attr(mode);
    const std::string what = "mr_mode 0x" + std::to_string(mode);
    EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, what.c_str());
  }
}

TEST(BadArgsDomainOpen, NicRequiresModeTheAppLacks) {
  hmr_domain_attr attr = domain_attr(0, "require=VIRT_ADDR");
  EXPECT_OPEN_ERROR(HMR_ENODATA, &attr, "require=VIRT_ADDR, app mode 0");
  attr = domain_attr(HMR_MR_VIRT_ADDR, "require=VIRT_ADDR|PROV_KEY");
  EXPECT_OPEN_ERROR(HMR_ENODATA, &attr, "require=VIRT_ADDR|PROV_KEY, app VIRT_ADDR");
  attr = domain_attr(HMR_MR_SCALABLE, "require=ALLOCATED");
  EXPECT_OPEN_ERROR(HMR_ENODATA, &attr, "require=ALLOCATED, app SCALABLE");
}

TEST(BadArgsDomainOpen, LimitsLargerThanTheNic) {
  const hmr_domain_attr nic = negotiated(0);
  ASSERT_GT(nic.mr_key_size, 0u);
  ASSERT_GT(nic.mr_iov_limit, 0u);
  ASSERT_GT(nic.mr_cnt, 0u);

  hmr_domain_attr attr = domain_attr(0);
  attr.mr_key_size = nic.mr_key_size + 1;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "mr_key_size above the NIC's");
  attr = domain_attr(0);
  attr.mr_key_size = SIZE_MAX;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "mr_key_size SIZE_MAX");

  attr = domain_attr(0);
  attr.mr_iov_limit = nic.mr_iov_limit + 1;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "mr_iov_limit above the NIC's");

  attr = domain_attr(0);
  attr.mr_cnt = nic.mr_cnt + 1;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "mr_cnt above the NIC's");

  // The same against a NIC configured with small limits.
  const hmr_domain_attr small = negotiated(0, "key_size=4;iov_limit=2;mr_cnt=2");
  EXPECT_EQ(small.mr_key_size, 4u);
  EXPECT_EQ(small.mr_iov_limit, 2u);
  EXPECT_EQ(small.mr_cnt, 2u);
  attr = domain_attr(0, "key_size=4;iov_limit=2;mr_cnt=2");
  attr.mr_key_size = 5;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "mr_key_size 5 on key_size=4");
  attr = domain_attr(0, "key_size=4;iov_limit=2;mr_cnt=2");
  attr.mr_iov_limit = 3;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "mr_iov_limit 3 on iov_limit=2");
  attr = domain_attr(0, "key_size=4;iov_limit=2;mr_cnt=2");
  attr.mr_cnt = 3;
  EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "mr_cnt 3 on mr_cnt=2");
}

TEST(BadArgsDomainOpen, ThreadingOutsideTheEnum) {
  for (const int threading : {6, 99, -1}) {
    hmr_domain_attr attr = domain_attr(0);
    store_enum(attr.threading, threading);
    const std::string what = "threading " + std::to_string(threading);
    EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, what.c_str());
  }
}

TEST(BadArgsDomainOpen, DisableP2pNotABoolean) {
  {
    ScopedEnv env("FI_HMEM_DISABLE_P2P", "maybe");
    hmr_domain_attr attr = domain_attr(0);
    EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "FI_HMEM_DISABLE_P2P=maybe");
  }
  {
    ScopedEnv env("FI_HMEM_DISABLE_P2P", "yesno");
    hmr_domain_attr attr = domain_attr(0);
    EXPECT_OPEN_ERROR(HMR_EINVAL, &attr, "FI_HMEM_DISABLE_P2P=yesno");
  }
  // Booleans are accepted, and the variable is read when the domain opens.
  for (const char* value : {"1", "0"}) {
    ScopedEnv env("FI_HMEM_DISABLE_P2P", value);
    hmr_domain_attr attr = domain_attr(0);
    Domain domain;
    EXPECT_EQ(hmr_domain_open(&attr, domain.out()), 0)
        << "FI_HMEM_DISABLE_P2P=" << value << ": " << hmr_last_error();
  }
}

// ============================================================== hmr_domain_close ==========

TEST(BadArgsDomainClose, NullAndWrongType) {
  EXPECT_HMR_ERROR(hmr_domain_close(nullptr), HMR_EINVAL);

  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  EXPECT_HMR_ERROR(hmr_domain_close(reinterpret_cast<hmr_domain*>(eq.get())), HMR_EINVAL);
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
}

TEST(BadArgsDomainClose, BusyWhileObjectsOpen) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);

  {
    Mr mr(reg_ok(domain, pages.data(), kPage));
    ASSERT_NE(mr.get(), nullptr);
    EXPECT_HMR_ERROR(hmr_domain_close(domain), HMR_EBUSY);
    ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  }
  {
    Cntr cntr;
    ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));
    EXPECT_HMR_ERROR(hmr_domain_close(domain), HMR_EBUSY);
    ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  }
  {
    Ep ep;
    ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, ep.out()));
    EXPECT_HMR_ERROR(hmr_domain_close(domain), HMR_EBUSY);
    ASSERT_HMR_OK(hmr_ep_close(ep.release()));
  }
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_domain_bind ===========

TEST(BadArgsDomainBind, NullWrongTypeAndFlags) {
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));
  Ep ep;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, ep.out()));

  EXPECT_HMR_ERROR(hmr_domain_bind(nullptr, hmr_eq_fid(eq), HMR_REG_MR), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, nullptr, HMR_REG_MR), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_cntr_fid(cntr), HMR_REG_MR), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_ep_fid(ep), HMR_REG_MR), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, reinterpret_cast<hmr_fid*>(domain.get()), HMR_REG_MR),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_domain_bind(reinterpret_cast<hmr_domain*>(eq.get()), hmr_eq_fid(eq),
                                   HMR_REG_MR),
                   HMR_EINVAL);

  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_eq_fid(eq), 0), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_eq_fid(eq), HMR_REG_MR | 1), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_eq_fid(eq), HMR_REMOTE_WRITE), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_eq_fid(eq), 1ULL << 63), HMR_EBADFLAGS);

  ASSERT_HMR_OK(hmr_ep_close(ep.release()));
  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
}

TEST(BadArgsDomainBind, Twice) {
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  Eq other;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, other.out()));

  ASSERT_HMR_OK(hmr_domain_bind(domain, hmr_eq_fid(eq), HMR_REG_MR));
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_eq_fid(eq), HMR_REG_MR), HMR_EBUSY);
  EXPECT_HMR_ERROR(hmr_domain_bind(domain, hmr_eq_fid(other), HMR_REG_MR), HMR_EBUSY);
  // The queue stays in use while the domain is bound to it.
  EXPECT_HMR_ERROR(hmr_eq_close(eq), HMR_EBUSY);

  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  ASSERT_HMR_OK(hmr_eq_close(other.release()));
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
}

TEST(BadArgsDomainBind, AsyncDomainRejectsBadArgumentsAtOnce) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  ASSERT_HMR_OK(hmr_domain_bind(domain, hmr_eq_fid(eq), HMR_REG_MR));

  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, pages.data(), kPage, 1ULL << 20, 0, next_key(),
                                          0, mr_out, nullptr));
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, nullptr, kPage, kAllAccess, 0, next_key(),
                                          0, mr_out, nullptr));
  EXPECT_REG_ERROR(HMR_EBADFLAGS, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0,
                                             next_key(), 1ULL << 62, mr_out, nullptr));
  // Nothing was queued for the refused registrations.
  uint32_t event = 77;
  hmr_eq_entry entry;
  std::memset(&entry, 0xa5, sizeof entry);
  EXPECT_HMR_ERROR(hmr_eq_read(eq, &event, &entry, 0), HMR_EAGAIN);
  hmr_eq_err_entry err_entry;
  std::memset(&err_entry, 0xa5, sizeof err_entry);
  EXPECT_HMR_ERROR(hmr_eq_readerr(eq, &err_entry, 0), HMR_EAGAIN);

  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
}

// ============================================================== hmr_domain_stats ==========

TEST(BadArgsDomainStats, NullAndSize) {
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);

  hmr_domain_stats stats;
  std::memset(&stats, 0xa5, sizeof stats);
  stats.size = sizeof stats;
  EXPECT_HMR_ERROR(hmr_domain_query_stats(nullptr, &stats), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_domain_query_stats(domain, nullptr), HMR_EINVAL);

  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  EXPECT_HMR_ERROR(hmr_domain_query_stats(reinterpret_cast<hmr_domain*>(eq.get()), &stats),
                   HMR_EINVAL);

  constexpr size_t kFirstVersion = offsetof(hmr_domain_stats, deregistration_ns);
  for (const size_t size : {size_t{0}, size_t{1}, sizeof(size_t), kFirstVersion - 8}) {
    SCOPED_TRACE("stats.size " + std::to_string(size));
    std::memset(&stats, 0xa5, sizeof stats);
    stats.size = size;
    hmr_domain_stats before;
    std::memcpy(&before, &stats, sizeof stats);
    EXPECT_HMR_ERROR(hmr_domain_query_stats(domain, &stats), HMR_EINVAL);
    EXPECT_EQ(std::memcmp(&before, &stats, sizeof stats), 0) << "stats written on failure";
  }

  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  ASSERT_HMR_OK(hmr_domain_query_stats(domain, &stats));
  EXPECT_EQ(stats.size, sizeof stats);
  EXPECT_EQ(stats.mr_open, 0u);

  // A caller built before deregistration_ns: accepted, and nothing written past its size.
  std::memset(&stats, 0xa5, sizeof stats);
  stats.size = kFirstVersion;
  ASSERT_HMR_OK(hmr_domain_query_stats(domain, &stats));
  EXPECT_EQ(stats.size, kFirstVersion);
  EXPECT_EQ(stats.mr_open, 0u);
  EXPECT_EQ(stats.deregistration_ns, 0xa5a5a5a5a5a5a5a5u) << "written past the caller's size";

  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_mr_reg / regv =========

TEST(BadArgsMrReg, NullHandleAndOutput) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));

  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(nullptr, pages.data(), kPage, kAllAccess, 0,
                                          next_key(), 0, mr_out, nullptr));
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(reinterpret_cast<hmr_domain*>(eq.get()), pages.data(),
                                          kPage, kAllAccess, 0, next_key(), 0, mr_out, nullptr));
  EXPECT_HMR_ERROR(
      hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0, next_key(), 0, nullptr, nullptr),
      HMR_EINVAL);

  const iovec iov{pages.data(), kPage};
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(nullptr, &iov, 1, kAllAccess, 0, next_key(), 0,
                                           mr_out, nullptr));
  EXPECT_HMR_ERROR(
      hmr_mr_regv(domain, &iov, 1, kAllAccess, 0, next_key(), 0, nullptr, nullptr), HMR_EINVAL);

  const hmr_mr_attr attr = host_attr(&iov, 1);
  EXPECT_REGATTR_ERROR(HMR_EINVAL, nullptr, &attr, 0);
  EXPECT_REGATTR_ERROR(HMR_EINVAL, reinterpret_cast<hmr_domain*>(eq.get()), &attr, 0);
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, nullptr, 0);
  EXPECT_HMR_ERROR(hmr_mr_regattr(domain, &attr, 0, nullptr), HMR_EINVAL);

  hmr_domain_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  ASSERT_HMR_OK(hmr_domain_query_stats(domain, &stats));
  EXPECT_EQ(stats.mr_open, 0u) << "a refused registration left an MR open";

  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrReg, NoMemory) {
  Pages pages(4 * kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);

  // Bytes at NULL.  (Zero bytes, anywhere, are a registration as in libfabric: see
  // ZeroBytesAndNoAccess.)
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, nullptr, kPage, kAllAccess, 0, next_key(), 0,
                                          mr_out, nullptr));
  // A range that wraps the address space.
  void* const near_top = reinterpret_cast<void*>(UINTPTR_MAX - kPage + 1);
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, near_top, 2 * kPage, kAllAccess, 0, next_key(),
                                          0, mr_out, nullptr));
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, pages.data(), SIZE_MAX, kAllAccess, 0,
                                          next_key(), 0, mr_out, nullptr));

  // regv: no iovecs, NULL array, a bad segment among good ones.
  const iovec good[2] = {{pages.data(), kPage}, {pages.data() + 2 * kPage, kPage}};
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(domain, good, 0, kAllAccess, 0, next_key(), 0, mr_out,
                                           nullptr));
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(domain, nullptr, 1, kAllAccess, 0, next_key(), 0,
                                           mr_out, nullptr));
  // (A segment of zero bytes among good ones is no bad segment: it registers, as zero bytes
  // anywhere do; ZeroBytesAndNoAccess.EmptySegmentsDeclaredMemoryAndUnmappedAddresses.)
  const iovec null_base[2] = {{pages.data(), kPage}, {nullptr, kPage}};
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(domain, null_base, 2, kAllAccess, 0, next_key(), 0,
                                           mr_out, nullptr));
  const iovec wraps[2] = {{pages.data(), kPage}, {near_top, 2 * kPage}};
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(domain, wraps, 2, kAllAccess, 0, next_key(), 0,
                                           mr_out, nullptr));

  // regattr: iov_count 0, mr_iov NULL.
  hmr_mr_attr attr = host_attr(good, 0);
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  attr = host_attr(nullptr, 1);
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  // A dma-buf description without HMR_MR_DMABUF does not count as memory.
  const hmr_mr_dmabuf dmabuf{0, 0, kPage, pages.data()};
  attr = host_attr(nullptr, 0);
  attr.dmabuf = &dmabuf;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);

  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrReg, IovCountAboveLimit) {
  Pages pages(16 * kPage);
  std::vector<iovec> iov;
  for (size_t i = 0; i < 8; ++i) iov.push_back({pages.data() + 2 * i * kPage, kPage});

  {
    hmr_domain_attr attr = domain_attr(0);
    Domain domain(open_sim_domain(0, nullptr, &attr));
    ASSERT_NE(domain.get(), nullptr);
    ASSERT_LT(attr.mr_iov_limit, iov.size()) << "test needs a NIC iov limit below 8";
    const size_t over = attr.mr_iov_limit + 1;
    EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(domain, iov.data(), over, kAllAccess, 0,
                                             next_key(), 0, mr_out, nullptr));
    const hmr_mr_attr mr_attr = host_attr(iov.data(), over);
    EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &mr_attr, 0);
    ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  }
  {
    // A limit the application asked for is enforced just the same.
    hmr_domain_attr attr = domain_attr(0);
    attr.mr_iov_limit = 2;
    Domain domain;
    ASSERT_HMR_OK(hmr_domain_open(&attr, domain.out()));
    EXPECT_EQ(attr.mr_iov_limit, 2u);
    EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(domain, iov.data(), 3, kAllAccess, 0, next_key(), 0,
                                             mr_out, nullptr));
    ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  }
}

TEST(BadArgsMrReg, LengthAboveMaxMrSize) {
  Pages pages(4 * kPage);
  Domain domain(open_sim_domain(0, "max_mr_size=8192"));
  ASSERT_NE(domain.get(), nullptr);
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, pages.data(), 3 * kPage, kAllAccess, 0,
                                          next_key(), 0, mr_out, nullptr));
  // The total of a regv counts, not each segment.
  const iovec iov[2] = {{pages.data(), 2 * kPage}, {pages.data() + 2 * kPage, 2 * kPage}};
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_regv(domain, iov, 2, kAllAccess, 0, next_key(), 0, mr_out,
                                           nullptr));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrReg, AccessAndOffset) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);

  const uint64_t kBadAccess[] = {1, 1ULL << 20, 1ULL << 63, HMR_REMOTE_READ | (1ULL << 15)};
  for (const uint64_t access : kBadAccess) {
    SCOPED_TRACE("access " + std::to_string(access));
    EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, pages.data(), kPage, access, 0, next_key(),
                                            0, mr_out, nullptr));
  }
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 1, next_key(),
                                          0, mr_out, nullptr));
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, kPage,
                                          next_key(), 0, mr_out, nullptr));
  const iovec iov{pages.data(), kPage};
  hmr_mr_attr attr = host_attr(&iov, 1);
  attr.offset = 8;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);

  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrReg, Flags) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);

  const uint64_t kUnknownFlags[] = {1, 1ULL << 30, 1ULL << 62, 1ULL << 63, HMR_REG_MR};
  for (const uint64_t flags : kUnknownFlags) {
    SCOPED_TRACE("flags " + std::to_string(flags));
    EXPECT_REG_ERROR(HMR_EBADFLAGS, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0,
                                               next_key(), flags, mr_out, nullptr));
  }
  // Contradictory HMEM flags, and HMEM flags on host memory (detected and declared).
  EXPECT_REG_ERROR(HMR_EBADFLAGS,
                   hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0, next_key(),
                              HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC, mr_out, nullptr));
  EXPECT_REG_ERROR(HMR_EBADFLAGS, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0,
                                             next_key(), HMR_HMEM_DEVICE_ONLY, mr_out, nullptr));
  EXPECT_REG_ERROR(HMR_EBADFLAGS, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0,
                                             next_key(), HMR_HMEM_HOST_ALLOC, mr_out, nullptr));
  const iovec iov{pages.data(), kPage};
  const hmr_mr_attr attr = host_attr(&iov, 1);
  EXPECT_REGATTR_ERROR(HMR_EBADFLAGS, domain, &attr, HMR_HMEM_DEVICE_ONLY | HMR_HMEM_HOST_ALLOC);
  EXPECT_REGATTR_ERROR(HMR_EBADFLAGS, domain, &attr, HMR_HMEM_DEVICE_ONLY);
  EXPECT_REGATTR_ERROR(HMR_EBADFLAGS, domain, &attr, HMR_HMEM_HOST_ALLOC);
  EXPECT_REGATTR_ERROR(HMR_EBADFLAGS, domain, &attr, 1ULL << 33);

  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrReg, RequestedKeyWiderThanKeySize) {
  Pages pages(kPage);
  {
    hmr_domain_attr attr = domain_attr(0);
    Domain domain(open_sim_domain(0, "key_size=4", &attr));
    ASSERT_NE(domain.get(), nullptr);
    ASSERT_EQ(attr.mr_key_size, 4u);
    EXPECT_REG_ERROR(HMR_EKEYREJECTED, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0,
                                                  1ULL << 40, 0, mr_out, nullptr));
    EXPECT_REG_ERROR(HMR_EKEYREJECTED, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0,
                                                  1ULL << 32, 0, mr_out, nullptr));
    // The widest key that fits is accepted.
    Mr mr;
    ASSERT_HMR_OK(hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0, 0xffffffffULL, 0,
                             mr.out(), nullptr));
    ASSERT_HMR_OK(hmr_mr_close(mr.release()));
    ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  }
  {
    // A key size the application asked for (smaller than the NIC's) binds the same way.
    hmr_domain_attr attr = domain_attr(0);
    attr.mr_key_size = 2;
    Domain domain;
    ASSERT_HMR_OK(hmr_domain_open(&attr, domain.out()));
    ASSERT_EQ(attr.mr_key_size, 2u);
    EXPECT_REG_ERROR(HMR_EKEYREJECTED, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0,
                                                  0x10000, 0, mr_out, nullptr));
    ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  }
}

TEST(BadArgsMrReg, DuplicateRequestedKey) {
  Pages pages(2 * kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  const uint64_t key = next_key();
  Mr first;
  ASSERT_HMR_OK(hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0, key, 0, first.out(),
                           nullptr));
  EXPECT_REG_ERROR(HMR_ENOKEY, hmr_mr_reg(domain, pages.data() + kPage, kPage, kAllAccess, 0,
                                          key, 0, mr_out, nullptr));
  // Same range, same key: still a second MR with a key in use.
  EXPECT_REG_ERROR(HMR_ENOKEY, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0, key, 0,
                                          mr_out, nullptr));
  ASSERT_HMR_OK(hmr_mr_close(first.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrReg, UnmappedPageInAllocatedDomain) {
  Pages pages(3 * kPage);
  ASSERT_EQ(munmap(pages.data() + kPage, kPage), 0);
  Domain domain(open_sim_domain(HMR_MR_ALLOCATED, "require=ALLOCATED"));
  ASSERT_NE(domain.get(), nullptr);
  EXPECT_REG_ERROR(HMR_EFAULT, hmr_mr_reg(domain, pages.data(), 3 * kPage, kAllAccess, 0,
                                          next_key(), 0, mr_out, nullptr));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrReg, MrCntExhausted) {
  Pages pages(3 * kPage);
  hmr_domain_attr attr = domain_attr(0);
  Domain domain(open_sim_domain(0, "mr_cnt=2", &attr));
  ASSERT_NE(domain.get(), nullptr);
  ASSERT_EQ(attr.mr_cnt, 2u);
  Mr first(reg_ok(domain, pages.data(), kPage));
  Mr second(reg_ok(domain, pages.data() + kPage, kPage));
  ASSERT_NE(first.get(), nullptr);
  ASSERT_NE(second.get(), nullptr);
  EXPECT_REG_ERROR(HMR_ENOSPC, hmr_mr_reg(domain, pages.data() + 2 * kPage, kPage, kAllAccess, 0,
                                          next_key(), 0, mr_out, nullptr));
  ASSERT_HMR_OK(hmr_mr_close(second.release()));
  ASSERT_HMR_OK(hmr_mr_close(first.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_mr_regattr ============

TEST(BadArgsMrRegattr, AttrSize) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  const iovec iov{pages.data(), kPage};

  for (const size_t size : {size_t{0}, size_t{1}, sizeof(size_t),
                            offsetof(hmr_mr_attr, page_size), sizeof(hmr_mr_attr) - 1}) {
    SCOPED_TRACE("attr.size " + std::to_string(size));
    hmr_mr_attr attr = host_attr(&iov, 1);
    attr.size = size;
    EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  }

  struct Bigger {
    hmr_mr_attr a;
    uint64_t extra;
  };
  Bigger big;
  std::memset(&big, 0, sizeof big);
  big.a = host_attr(&iov, 1);
  big.a.size = sizeof big;
  big.extra = 0x5a;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &big.a, 0);

  big.extra = 0;
  Mr mr;
  ASSERT_HMR_OK(hmr_mr_regattr(domain, &big.a, 0, mr.out()));
  EXPECT_NE(mr.get(), nullptr);
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrRegattr, IfaceAndDevice) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  const iovec iov{pages.data(), kPage};

  for (const int iface : {99, HMR_HMEM_IFACE_COUNT, -1}) {
    SCOPED_TRACE("iface " + std::to_string(iface));
    hmr_mr_attr attr = host_attr(&iov, 1);
    store_enum(attr.iface, iface);
    EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  }

  hmr_mr_attr attr = host_attr(&iov, 1);
  attr.device.reserved = 3;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);  // SYSTEM with a device

  attr = host_attr(&iov, 1);
  attr.iface = HMR_HMEM_CUDA;
  attr.device.cuda = -1;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  attr = host_attr(&iov, 1);
  attr.iface = HMR_HMEM_ROCR;
  attr.device.rocr = -2;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  attr = host_attr(&iov, 1);
  attr.iface = HMR_HMEM_NEURON;
  attr.device.neuron = INT_MIN;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  attr = host_attr(&iov, 1);
  attr.iface = HMR_HMEM_ZE;
  attr.device.ze = -1;  // does not decode
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);

  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrRegattr, DeviceIfaceWithoutRuntimeFailsClosed) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  const iovec iov{pages.data(), kPage};

  int tested = 0;
  for (const hmr_hmem_iface iface : {HMR_HMEM_CUDA, HMR_HMEM_ROCR, HMR_HMEM_ZE, HMR_HMEM_NEURON,
                                     HMR_HMEM_SYNAPSEAI}) {
    if (runtime_may_be_present(iface)) continue;  // that runtime is here: nothing to prove
    SCOPED_TRACE("iface " + std::to_string(static_cast<int>(iface)));
    hmr_mr_attr attr = host_attr(&iov, 1);
    attr.iface = iface;
    attr.device.reserved = 0;  // device 0 of every iface (ZE: driver 0, device 0)
    EXPECT_REGATTR_ERROR(HMR_ENOSYS, domain, &attr, 0);
    ++tested;
  }
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
  if (tested == 0) GTEST_SKIP() << "every device runtime may be loadable on this machine";
}

TEST(BadArgsMrRegattr, Dmabuf) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  const iovec iov{pages.data(), kPage};

  // HMR_MR_DMABUF without a dma-buf, or with mr_iov as well; also through hmr_mr_reg.
  hmr_mr_attr attr = host_attr(nullptr, 0);
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, HMR_MR_DMABUF);
  EXPECT_REG_ERROR(HMR_EINVAL, hmr_mr_reg(domain, pages.data(), kPage, kAllAccess, 0, next_key(),
                                          HMR_MR_DMABUF, mr_out, nullptr));

  const int fd = memfd_create("hmr-bad-args", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kPage)), 0);

  hmr_mr_dmabuf dmabuf{fd, 0, kPage, pages.data()};
  attr = host_attr(&iov, 1);
  attr.dmabuf = &dmabuf;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, HMR_MR_DMABUF);

  attr = host_attr(nullptr, 0);
  attr.dmabuf = &dmabuf;
  dmabuf = {-1, 0, kPage, pages.data()};
  EXPECT_REGATTR_ERROR(HMR_EBADF, domain, &attr, HMR_MR_DMABUF);
  dmabuf = {-100, 0, kPage, pages.data()};
  EXPECT_REGATTR_ERROR(HMR_EBADF, domain, &attr, HMR_MR_DMABUF);
  dmabuf = {fd, 0, 0, pages.data()};
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, HMR_MR_DMABUF);
  dmabuf = {fd, UINT64_MAX - 100, kPage, pages.data()};
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, HMR_MR_DMABUF);

  ASSERT_EQ(close(fd), 0);
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrRegattr, AuthKey) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  const iovec iov{pages.data(), kPage};
  static const uint8_t kAuthKey[8] = {1, 2, 3, 4, 5, 6, 7, 8};

  hmr_mr_attr attr = host_attr(&iov, 1);
  attr.auth_key_size = sizeof kAuthKey;
  attr.auth_key = nullptr;
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, HMR_AUTH_KEY);

  attr = host_attr(&iov, 1);  // no auth key at all
  EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, HMR_AUTH_KEY);

  // A well-formed key on the sim NIC, which has no authorization keys.
  attr = host_attr(&iov, 1);
  attr.auth_key_size = sizeof kAuthKey;
  attr.auth_key = kAuthKey;
  EXPECT_REGATTR_ERROR(HMR_EOPNOTSUPP, domain, &attr, 0);
  EXPECT_REGATTR_ERROR(HMR_EOPNOTSUPP, domain, &attr, HMR_AUTH_KEY);

  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrRegattr, PageSize) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  const iovec iov{pages.data(), kPage};

  for (const size_t page_size : {size_t{1000}, size_t{3000}, size_t{1}, size_t{2048},
                                 size_t{4097}, size_t{12288}, SIZE_MAX}) {
    SCOPED_TRACE("page_size " + std::to_string(page_size));
    hmr_mr_attr attr = host_attr(&iov, 1);
    attr.page_size = page_size;
    EXPECT_REGATTR_ERROR(HMR_EINVAL, domain, &attr, 0);
  }
  hmr_mr_attr attr = host_attr(&iov, 1);
  attr.page_size = 4096;
  Mr mr;
  ASSERT_HMR_OK(hmr_mr_regattr(domain, &attr, 0, mr.out()));
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== keys ======================

TEST(BadArgsMrKeys, KeyAndDescOfInvalidHandles) {
  EXPECT_EQ(hmr_mr_key(nullptr), HMR_KEY_NOTAVAIL);
  EXPECT_EQ(hmr_mr_desc(nullptr), nullptr);

  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  EXPECT_EQ(hmr_mr_key(reinterpret_cast<hmr_mr*>(eq.get())), HMR_KEY_NOTAVAIL);
  EXPECT_EQ(hmr_mr_desc(reinterpret_cast<hmr_mr*>(eq.get())), nullptr);
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
}

TEST(BadArgsMrKeys, RawAttr) {
  Pages pages(kPage);
  hmr_domain_attr dattr = domain_attr(0);
  Domain domain(open_sim_domain(0, nullptr, &dattr));
  ASSERT_NE(domain.get(), nullptr);
  Mr mr(reg_ok(domain, pages.data(), kPage));
  ASSERT_NE(mr.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));

  uint64_t base = 42;
  uint8_t raw[32];
  std::memset(raw, 0xa5, sizeof raw);
  uint8_t raw_before[32];
  std::memcpy(raw_before, raw, sizeof raw);
  size_t size = sizeof raw;

  EXPECT_HMR_ERROR(hmr_mr_raw_attr(nullptr, &base, raw, &size, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(reinterpret_cast<hmr_mr*>(eq.get()), &base, raw, &size, 0),
                   HMR_EINVAL);
  // NULL outputs (the doc names no code for these; EINVAL as for every NULL argument).
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr, &base, raw, nullptr, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr, nullptr, raw, &size, 0), HMR_EINVAL);
  EXPECT_EQ(size, sizeof raw);
  EXPECT_EQ(base, 42u);
  EXPECT_EQ(std::memcmp(raw, raw_before, sizeof raw), 0);

  // Non-zero flags: nothing written, not even the size.
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr, &base, raw, &size, 1), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr, &base, raw, &size, 1ULL << 63), HMR_EBADFLAGS);
  EXPECT_EQ(size, sizeof raw);
  EXPECT_EQ(base, 42u);
  EXPECT_EQ(std::memcmp(raw, raw_before, sizeof raw), 0);

  // Too small: only the needed size is written.
  size = 0;
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr, &base, nullptr, &size, 0), HMR_ETOOSMALL);
  EXPECT_EQ(size, dattr.mr_key_size);
  EXPECT_EQ(base, 42u);
  size = dattr.mr_key_size - 1;
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr, &base, raw, &size, 0), HMR_ETOOSMALL);
  EXPECT_EQ(size, dattr.mr_key_size);
  EXPECT_EQ(base, 42u);
  EXPECT_EQ(std::memcmp(raw, raw_before, sizeof raw), 0);

  size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr, &base, raw, &size, 0));
  EXPECT_EQ(size, dattr.mr_key_size);

  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrKeys, MapRaw) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Mr mr(reg_ok(domain, pages.data(), kPage));
  ASSERT_NE(mr.get(), nullptr);
  uint64_t base = 0;
  uint8_t raw[16] = {};
  size_t size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr, &base, raw, &size, 0));
  ASSERT_LT(size, sizeof raw);

  uint64_t key = 42;
  EXPECT_HMR_ERROR(hmr_mr_map_raw(nullptr, base, raw, size, &key, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, nullptr, size, &key, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, raw, size, nullptr, 0), HMR_EINVAL);
  // A raw key of the wrong size.
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, raw, size - 1, &key, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, raw, size + 1, &key, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, raw, 0, &key, 0), HMR_EINVAL);
  // flags must be 0 (code not in the doc; EBADFLAGS as for hmr_mr_raw_attr).
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, raw, size, &key, 1), HMR_EBADFLAGS);
  EXPECT_EQ(key, 42u) << "key written on failure";

  EXPECT_HMR_ERROR(hmr_mr_unmap_key(nullptr, hmr_mr_key(mr)), HMR_EINVAL);

  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrKeys, RawDomain) {
  Pages pages(kPage);
  hmr_domain_attr dattr = domain_attr(0);
  Domain domain(open_sim_domain(HMR_MR_RAW | HMR_MR_PROV_KEY, "require=RAW", &dattr));
  ASSERT_NE(domain.get(), nullptr);
  ASSERT_EQ(dattr.mr_key_size, 16u);
  Mr mr(reg_ok(domain, pages.data(), kPage));
  ASSERT_NE(mr.get(), nullptr);
  EXPECT_EQ(hmr_mr_key(mr), HMR_KEY_NOTAVAIL);

  uint64_t base = 0;
  uint8_t raw[16] = {};
  size_t size = 8;
  EXPECT_HMR_ERROR(hmr_mr_raw_attr(mr, &base, raw, &size, 0), HMR_ETOOSMALL);
  EXPECT_EQ(size, 16u);
  ASSERT_HMR_OK(hmr_mr_raw_attr(mr, &base, raw, &size, 0));

  uint64_t key = 42;
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, raw, 8, &key, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_map_raw(domain, base, raw, 15, &key, 0), HMR_EINVAL);
  EXPECT_EQ(key, 42u) << "key written on failure";

  // Keys never mapped in this domain.
  EXPECT_HMR_ERROR(hmr_mr_unmap_key(domain, 0), HMR_ENOENT);
  EXPECT_HMR_ERROR(hmr_mr_unmap_key(domain, 12345), HMR_ENOENT);
  EXPECT_HMR_ERROR(hmr_mr_unmap_key(domain, HMR_KEY_NOTAVAIL), HMR_ENOENT);
  // A mapped key can be unmapped once.
  ASSERT_HMR_OK(hmr_mr_map_raw(domain, base, raw, size, &key, 0));
  ASSERT_HMR_OK(hmr_mr_unmap_key(domain, key));
  EXPECT_HMR_ERROR(hmr_mr_unmap_key(domain, key), HMR_ENOENT);

  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_mr_bind ===============

TEST(BadArgsMrBind, NullAndWrongType) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Mr mr(reg_ok(domain, pages.data(), kPage));
  ASSERT_NE(mr.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));

  EXPECT_HMR_ERROR(hmr_mr_bind(nullptr, hmr_cntr_fid(cntr), HMR_REMOTE_WRITE), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, nullptr, HMR_REMOTE_WRITE), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, nullptr, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_eq_fid(eq), 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_eq_fid(eq), HMR_REMOTE_WRITE), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, reinterpret_cast<hmr_fid*>(domain.get()), 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, reinterpret_cast<hmr_fid*>(mr.get()), 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(reinterpret_cast<hmr_mr*>(cntr.get()), hmr_cntr_fid(cntr),
                               HMR_REMOTE_WRITE),
                   HMR_EINVAL);

  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrBind, EndpointOutsideEndpointDomain) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Mr mr(reg_ok(domain, pages.data(), kPage));
  ASSERT_NE(mr.get(), nullptr);
  Ep ep;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, ep.out()));
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_ep_fid(ep), 0), HMR_EINVAL);
  ASSERT_HMR_OK(hmr_ep_close(ep.release()));
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrBind, EndpointDomain) {
  Pages pages(kPage);
  Domain domain(open_sim_domain(HMR_MR_ENDPOINT, "require=ENDPOINT"));
  ASSERT_NE(domain.get(), nullptr);
  Domain other(open_sim_domain(HMR_MR_ENDPOINT, "require=ENDPOINT"));
  ASSERT_NE(other.get(), nullptr);
  Ep ep;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, ep.out()));
  Ep foreign_ep;
  ASSERT_HMR_OK(hmr_ep_open(other, nullptr, foreign_ep.out()));
  Mr mr(reg_ok(domain, pages.data(), kPage));
  ASSERT_NE(mr.get(), nullptr);

  EXPECT_HMR_ERROR(hmr_mr_enable(mr), HMR_EINVAL);  // not bound yet
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_ep_fid(ep), 1), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_ep_fid(ep), HMR_REMOTE_WRITE), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_ep_fid(foreign_ep), 0), HMR_EINVAL);

  ASSERT_HMR_OK(hmr_mr_bind(mr, hmr_ep_fid(ep), 0));
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_ep_fid(ep), 0), HMR_EBUSY);
  EXPECT_HMR_ERROR(hmr_ep_close(ep), HMR_EBUSY);  // an MR is bound to it
  ASSERT_HMR_OK(hmr_mr_enable(mr));
  EXPECT_HMR_ERROR(hmr_mr_bind(mr, hmr_ep_fid(ep), 0), HMR_EBUSY);

  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_ep_close(foreign_ep.release()));
  ASSERT_HMR_OK(hmr_ep_close(ep.release()));
  ASSERT_HMR_OK(hmr_domain_close(other.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsMrBind, Counter) {
  Pages pages(2 * kPage);
  Domain domain(open_sim_domain(HMR_MR_RMA_EVENT, "require=RMA_EVENT"));
  ASSERT_NE(domain.get(), nullptr);
  Domain other(open_sim_domain(HMR_MR_RMA_EVENT, "require=RMA_EVENT"));
  ASSERT_NE(other.get(), nullptr);
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));
  Cntr foreign_cntr;
  ASSERT_HMR_OK(hmr_cntr_open(other, nullptr, foreign_cntr.out()));
  Mr event_mr(reg_ok(domain, pages.data(), kPage, kAllAccess, HMR_RMA_EVENT));
  ASSERT_NE(event_mr.get(), nullptr);
  Mr plain_mr(reg_ok(domain, pages.data() + kPage, kPage));
  ASSERT_NE(plain_mr.get(), nullptr);

  const uint64_t kBadFlags[] = {0, HMR_READ, HMR_WRITE, HMR_REMOTE_WRITE | 1,
                                HMR_REMOTE_READ | (1ULL << 63)};
  for (const uint64_t flags : kBadFlags) {
    SCOPED_TRACE("flags " + std::to_string(flags));
    EXPECT_HMR_ERROR(hmr_mr_bind(event_mr, hmr_cntr_fid(cntr), flags), HMR_EBADFLAGS);
  }
  // An MR registered without HMR_RMA_EVENT, and a counter of another domain.
  EXPECT_HMR_ERROR(hmr_mr_bind(plain_mr, hmr_cntr_fid(cntr), HMR_REMOTE_WRITE), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_bind(event_mr, hmr_cntr_fid(foreign_cntr), HMR_REMOTE_WRITE),
                   HMR_EINVAL);

  ASSERT_HMR_OK(hmr_mr_bind(event_mr, hmr_cntr_fid(cntr), HMR_REMOTE_WRITE));
  EXPECT_HMR_ERROR(hmr_cntr_close(cntr), HMR_EBUSY);  // an MR is bound to it
  ASSERT_HMR_OK(hmr_mr_enable(event_mr));
  EXPECT_HMR_ERROR(hmr_mr_bind(event_mr, hmr_cntr_fid(cntr), HMR_REMOTE_READ), HMR_EBUSY);

  ASSERT_HMR_OK(hmr_mr_close(plain_mr.release()));
  ASSERT_HMR_OK(hmr_mr_close(event_mr.release()));
  ASSERT_HMR_OK(hmr_cntr_close(foreign_cntr.release()));
  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_domain_close(other.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_mr_enable =============

TEST(BadArgsMrEnable, NullAndWrongType) {
  EXPECT_HMR_ERROR(hmr_mr_enable(nullptr), HMR_EINVAL);

  Pages pages(kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));
  EXPECT_HMR_ERROR(hmr_mr_enable(reinterpret_cast<hmr_mr*>(cntr.get())), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_enable(reinterpret_cast<hmr_mr*>(domain.get())), HMR_EINVAL);
  // An active MR enables trivially.
  Mr mr(reg_ok(domain, pages.data(), kPage));
  ASSERT_NE(mr.get(), nullptr);
  EXPECT_EQ(hmr_mr_enable(mr), 0) << hmr_last_error();

  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_mr_refresh ============

TEST(BadArgsMrRefresh, Arguments) {
  Pages pages(4 * kPage);
  Domain domain(open_sim_domain(HMR_MR_MMU_NOTIFY, "require=MMU_NOTIFY"));
  ASSERT_NE(domain.get(), nullptr);
  Mr mr(reg_ok(domain, pages.data() + kPage, 2 * kPage));
  ASSERT_NE(mr.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));

  const iovec inside{pages.data() + kPage, kPage};
  EXPECT_HMR_ERROR(hmr_mr_refresh(nullptr, &inside, 1, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_refresh(reinterpret_cast<hmr_mr*>(eq.get()), &inside, 1, 0),
                   HMR_EINVAL);
  // Ranges outside the MR: before it, after it, straddling its end.
  const iovec before{pages.data(), kPage};
  const iovec after{pages.data() + 3 * kPage, kPage};
  const iovec straddling{pages.data() + 2 * kPage, 2 * kPage};
  EXPECT_HMR_ERROR(hmr_mr_refresh(mr, &before, 1, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_refresh(mr, &after, 1, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_refresh(mr, &straddling, 1, 0), HMR_EINVAL);
  const iovec one_good_one_bad[2] = {inside, after};
  EXPECT_HMR_ERROR(hmr_mr_refresh(mr, one_good_one_bad, 2, 0), HMR_EINVAL);
  // No range at all (undocumented code; EINVAL as for registration without memory).
  EXPECT_HMR_ERROR(hmr_mr_refresh(mr, nullptr, 1, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_refresh(mr, &inside, 0, 0), HMR_EINVAL);
  // flags must be 0 (code not in the doc; EBADFLAGS as for hmr_mr_raw_attr).
  EXPECT_HMR_ERROR(hmr_mr_refresh(mr, &inside, 1, 1), HMR_EBADFLAGS);

  ASSERT_HMR_OK(hmr_mr_refresh(mr, &inside, 1, 0));

  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_mr_close(mr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_mr_close ==============

TEST(BadArgsMrClose, NullAndWrongType) {
  EXPECT_HMR_ERROR(hmr_mr_close(nullptr), HMR_EINVAL);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));
  EXPECT_HMR_ERROR(hmr_mr_close(reinterpret_cast<hmr_mr*>(cntr.get())), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_mr_close(reinterpret_cast<hmr_mr*>(domain.get())), HMR_EINVAL);
  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== event queue ===============

TEST(BadArgsEq, Open) {
  hmr_eq* eq = sentinel<hmr_eq>();
  hmr_eq_attr attr{sizeof(hmr_eq_attr), 0};
  EXPECT_HMR_ERROR(hmr_eq_open(&attr, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_open(nullptr, nullptr), HMR_EINVAL);

  for (const size_t size : {size_t{0}, size_t{1}, sizeof(size_t), sizeof(hmr_eq_attr) - 1}) {
    SCOPED_TRACE("attr.size " + std::to_string(size));
    attr.size = size;
    EXPECT_HMR_ERROR(hmr_eq_open(&attr, &eq), HMR_EINVAL);
    EXPECT_EQ(eq, sentinel<hmr_eq>());
  }

  struct Bigger {
    hmr_eq_attr a;
    uint64_t extra;
  };
  Bigger big{{sizeof(Bigger), 0}, 7};
  EXPECT_HMR_ERROR(hmr_eq_open(&big.a, &eq), HMR_EINVAL);
  EXPECT_EQ(eq, sentinel<hmr_eq>());
  big.extra = 0;
  Eq ok_big;
  ASSERT_HMR_OK(hmr_eq_open(&big.a, ok_big.out()));
  ASSERT_HMR_OK(hmr_eq_close(ok_big.release()));

  Eq defaults;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, defaults.out()));  // NULL attr means defaults
  ASSERT_HMR_OK(hmr_eq_close(defaults.release()));
}

TEST(BadArgsEq, Close) {
  EXPECT_HMR_ERROR(hmr_eq_close(nullptr), HMR_EINVAL);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  EXPECT_HMR_ERROR(hmr_eq_close(reinterpret_cast<hmr_eq*>(domain.get())), HMR_EINVAL);
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsEq, ReadSreadReaderr) {
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  hmr_eq* const wrong = reinterpret_cast<hmr_eq*>(cntr.get());

  uint32_t event = 77;
  hmr_eq_entry entry;
  std::memset(&entry, 0xa5, sizeof entry);
  hmr_eq_entry entry_before;
  std::memcpy(&entry_before, &entry, sizeof entry);
  hmr_eq_err_entry err;
  std::memset(&err, 0xa5, sizeof err);
  hmr_eq_err_entry err_before;
  std::memcpy(&err_before, &err, sizeof err);

  EXPECT_HMR_ERROR(hmr_eq_read(nullptr, &event, &entry, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_read(wrong, &event, &entry, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_read(eq, nullptr, &entry, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_read(eq, &event, nullptr, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_read(eq, &event, &entry, 1), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_eq_read(eq, &event, &entry, 0), HMR_EAGAIN);

  EXPECT_HMR_ERROR(hmr_eq_sread(nullptr, &event, &entry, 10, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_sread(wrong, &event, &entry, 10, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_sread(eq, nullptr, &entry, 10, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_sread(eq, &event, nullptr, 10, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_sread(eq, &event, &entry, 10, 1), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_eq_sread(eq, &event, &entry, 10, 0), HMR_ETIMEDOUT);

  EXPECT_HMR_ERROR(hmr_eq_readerr(nullptr, &err, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_readerr(wrong, &err, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_readerr(eq, nullptr, 0), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_eq_readerr(eq, &err, 1), HMR_EBADFLAGS);
  EXPECT_HMR_ERROR(hmr_eq_readerr(eq, &err, 0), HMR_EAGAIN);

  EXPECT_EQ(event, 77u) << "event written on failure";
  EXPECT_EQ(std::memcmp(&entry, &entry_before, sizeof entry), 0) << "entry written on failure";
  EXPECT_EQ(std::memcmp(&err, &err_before, sizeof err), 0) << "err entry written on failure";

  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== counters ==================

// Counters and endpoints open the same way: a domain, an optional attribute (size + flags 0),
// an output.  One check serves both.
template <typename Object, typename Attr, typename Owner>
void check_attr_open(int (*open)(hmr_domain*, const Attr*, Object**), int (*close)(Object*),
                     const char* name) {
  SCOPED_TRACE(name);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));

  Object* object = sentinel<Object>();
  Attr attr{sizeof(Attr), 0};
  EXPECT_HMR_ERROR(open(nullptr, &attr, &object), HMR_EINVAL);
  EXPECT_HMR_ERROR(open(reinterpret_cast<hmr_domain*>(eq.get()), &attr, &object), HMR_EINVAL);
  EXPECT_HMR_ERROR(open(domain, &attr, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(open(domain, nullptr, nullptr), HMR_EINVAL);
  for (const size_t size : {size_t{0}, size_t{1}, sizeof(size_t), sizeof(Attr) - 1}) {
    SCOPED_TRACE("attr.size " + std::to_string(size));
    attr.size = size;
    EXPECT_HMR_ERROR(open(domain, &attr, &object), HMR_EINVAL);
  }
  attr = {sizeof(Attr), 1};  // flags must be 0 (code not in the doc)
  EXPECT_HMR_ERROR(open(domain, &attr, &object), HMR_EBADFLAGS);

  struct Bigger {
    Attr a;
    uint64_t extra;
  };
  Bigger big{{sizeof(Bigger), 0}, 7};
  EXPECT_HMR_ERROR(open(domain, &big.a, &object), HMR_EINVAL);
  EXPECT_EQ(object, sentinel<Object>()) << "output written on failure";
  big.extra = 0;
  Owner ok_big;
  ASSERT_HMR_OK(open(domain, &big.a, ok_big.out()));
  ASSERT_HMR_OK(close(ok_big.release()));
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsCntr, Open) {
  check_attr_open<hmr_cntr, hmr_cntr_attr, Cntr>(hmr_cntr_open, hmr_cntr_close, "hmr_cntr_open");
}

TEST(BadArgsCntr, CloseAndRead) {
  EXPECT_HMR_ERROR(hmr_cntr_close(nullptr), HMR_EINVAL);
  uint64_t value = 42;
  EXPECT_HMR_ERROR(hmr_cntr_read(nullptr, &value), HMR_EINVAL);

  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Eq eq;
  ASSERT_HMR_OK(hmr_eq_open(nullptr, eq.out()));
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));

  EXPECT_HMR_ERROR(hmr_cntr_close(reinterpret_cast<hmr_cntr*>(eq.get())), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_cntr_read(reinterpret_cast<hmr_cntr*>(eq.get()), &value), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_cntr_read(cntr, nullptr), HMR_EINVAL);
  EXPECT_EQ(value, 42u) << "value written on failure";
  ASSERT_HMR_OK(hmr_cntr_read(cntr, &value));
  EXPECT_EQ(value, 0u);

  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_eq_close(eq.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== endpoints =================

TEST(BadArgsEp, Open) {
  check_attr_open<hmr_ep, hmr_ep_attr, Ep>(hmr_ep_open, hmr_ep_close, "hmr_ep_open");
}

TEST(BadArgsEp, CloseAndConnect) {
  EXPECT_HMR_ERROR(hmr_ep_close(nullptr), HMR_EINVAL);

  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Cntr cntr;
  ASSERT_HMR_OK(hmr_cntr_open(domain, nullptr, cntr.out()));
  Ep ep;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, ep.out()));
  hmr_ep* const wrong = reinterpret_cast<hmr_ep*>(cntr.get());

  EXPECT_HMR_ERROR(hmr_ep_close(wrong), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_connect(nullptr, ep), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_connect(ep, nullptr), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_connect(wrong, ep), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_connect(ep, wrong), HMR_EINVAL);

  ASSERT_HMR_OK(hmr_ep_close(ep.release()));
  ASSERT_HMR_OK(hmr_cntr_close(cntr.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// docs/semantics.md: closing either endpoint disconnects them, after which RMA on the other is
// "not connected" (hmr.h's comment on hmr_ep_close says EBUSY instead; the doc is followed).
TEST(BadArgsEp, RmaAfterPeerClosed) {
  Pages pages(2 * kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Ep ep;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, ep.out()));
  Ep peer;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, peer.out()));
  Mr target(reg_ok(domain, pages.data(), kPage, HMR_REMOTE_READ | HMR_REMOTE_WRITE));
  ASSERT_NE(target.get(), nullptr);
  uint64_t base = 0;
  uint8_t raw[16];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(target, &base, raw, &raw_size, 0));
  const uint64_t key = hmr_mr_key(target);

  ASSERT_HMR_OK(hmr_ep_connect(ep, peer));
  ASSERT_HMR_OK(hmr_ep_close(peer.release()));
  uint64_t result = 42;
  EXPECT_HMR_ERROR(hmr_ep_write(ep, pages.data() + kPage, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_read(ep, pages.data() + kPage, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_fetch_add(ep, 1, &result, base, key), HMR_EINVAL);
  EXPECT_EQ(result, 42u) << "result written on failure";

  ASSERT_HMR_OK(hmr_mr_close(target.release()));
  ASSERT_HMR_OK(hmr_ep_close(ep.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

TEST(BadArgsEp, Rma) {
  Pages target_pages(kPage);
  Pages local_pages(4 * kPage);
  Domain domain(open_sim_domain(0));
  ASSERT_NE(domain.get(), nullptr);
  Domain other(open_sim_domain(0));
  ASSERT_NE(other.get(), nullptr);
  Ep target_ep;  // declared first so that it is closed last
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, target_ep.out()));
  Ep ep;
  ASSERT_HMR_OK(hmr_ep_open(domain, nullptr, ep.out()));
  Mr target(reg_ok(domain, target_pages.data(), kPage, HMR_REMOTE_READ | HMR_REMOTE_WRITE));
  ASSERT_NE(target.get(), nullptr);
  uint64_t base = 0;
  uint8_t raw[16];
  size_t raw_size = sizeof raw;
  ASSERT_HMR_OK(hmr_mr_raw_attr(target, &base, raw, &raw_size, 0));
  const uint64_t key = hmr_mr_key(target);
  ASSERT_NE(key, HMR_KEY_NOTAVAIL);

  uint8_t* const buf = local_pages.data();
  uint64_t result = 42;

  // Not connected.
  EXPECT_HMR_ERROR(hmr_ep_write(ep, buf, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_read(ep, buf, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_fetch_add(ep, 1, &result, base, key), HMR_EINVAL);

  ASSERT_HMR_OK(hmr_ep_connect(ep, target_ep));

  // NULL / wrong-type endpoint.
  hmr_ep* const wrong = reinterpret_cast<hmr_ep*>(target.get());
  EXPECT_HMR_ERROR(hmr_ep_write(nullptr, buf, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_read(nullptr, buf, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_fetch_add(nullptr, 1, &result, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_write(wrong, buf, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_read(wrong, buf, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_fetch_add(wrong, 1, &result, base, key), HMR_EINVAL);

  // NULL buffer, length 0, NULL result, misaligned fetch_add.
  EXPECT_HMR_ERROR(hmr_ep_write(ep, nullptr, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_write(ep, buf, 0, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_read(ep, nullptr, 8, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_read(ep, buf, 0, nullptr, base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_fetch_add(ep, 1, nullptr, base, key), HMR_EINVAL);
  for (const uint64_t misalign : {1, 4, 7}) {
    SCOPED_TRACE("fetch_add at base + " + std::to_string(misalign));
    EXPECT_HMR_ERROR(hmr_ep_fetch_add(ep, 1, &result, base + misalign, key), HMR_EINVAL);
  }
  EXPECT_EQ(result, 42u) << "result written on failure";

  // desc: not covering buf, of another domain, lacking the local access right.
  Mr rw(reg_ok(domain, buf, kPage, HMR_READ | HMR_WRITE));
  Mr read_only(reg_ok(domain, buf + kPage, kPage, HMR_READ));
  Mr write_only(reg_ok(domain, buf + 2 * kPage, kPage, HMR_WRITE));
  Mr foreign(reg_ok(other, buf + 3 * kPage, kPage, HMR_READ | HMR_WRITE));
  ASSERT_NE(rw.get(), nullptr);
  ASSERT_NE(read_only.get(), nullptr);
  ASSERT_NE(write_only.get(), nullptr);
  ASSERT_NE(foreign.get(), nullptr);
  EXPECT_HMR_ERROR(hmr_ep_write(ep, buf + 3 * kPage, 8, hmr_mr_desc(rw), base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_write(ep, buf + kPage - 4, 8, hmr_mr_desc(rw), base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_read(ep, buf + 3 * kPage, 8, hmr_mr_desc(rw), base, key), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_write(ep, buf + 3 * kPage, 8, hmr_mr_desc(foreign), base, key),
                   HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_ep_write(ep, buf + kPage, 8, hmr_mr_desc(read_only), base, key),
                   HMR_EACCES);
  EXPECT_HMR_ERROR(hmr_ep_read(ep, buf + 2 * kPage, 8, hmr_mr_desc(write_only), base, key),
                   HMR_EACCES);

  // The same operations with good arguments go through.
  EXPECT_EQ(hmr_ep_write(ep, buf, 8, hmr_mr_desc(rw), base, key), 0) << hmr_last_error();
  EXPECT_EQ(hmr_ep_read(ep, buf, 8, nullptr, base, key), 0) << hmr_last_error();
  EXPECT_EQ(hmr_ep_fetch_add(ep, 1, &result, base, key), 0) << hmr_last_error();

  ASSERT_HMR_OK(hmr_mr_close(foreign.release()));
  ASSERT_HMR_OK(hmr_mr_close(write_only.release()));
  ASSERT_HMR_OK(hmr_mr_close(read_only.release()));
  ASSERT_HMR_OK(hmr_mr_close(rw.release()));
  ASSERT_HMR_OK(hmr_ep_close(ep.release()));
  ASSERT_HMR_OK(hmr_ep_close(target_ep.release()));
  ASSERT_HMR_OK(hmr_mr_close(target.release()));
  ASSERT_HMR_OK(hmr_domain_close(other.release()));
  ASSERT_HMR_OK(hmr_domain_close(domain.release()));
}

// ============================================================== hmr_strerror ==============

TEST(BadArgsStrerror, KnownCodesHaveDistinctText) {
  const int kKnown[] = {HMR_SUCCESS, HMR_EPERM,   HMR_ENOENT,       HMR_EIO,       HMR_EBADF,
                        HMR_EAGAIN,  HMR_ENOMEM,  HMR_EACCES,       HMR_EFAULT,    HMR_EBUSY,
                        HMR_ENODEV,  HMR_EINVAL,  HMR_ENOSPC,       HMR_ERANGE,    HMR_ENOSYS,
                        HMR_ENODATA, HMR_EOPNOTSUPP, HMR_EALREADY,  HMR_ETIMEDOUT,
                        HMR_EKEYREJECTED, HMR_ETOOSMALL, HMR_EBADFLAGS, HMR_EAVAIL,
                        HMR_ENOKEY};
  std::set<std::string> texts;
  for (const int code : kKnown) {
    SCOPED_TRACE("code " + std::to_string(code));
    const char* positive = hmr_strerror(code);
    ASSERT_NE(positive, nullptr);
    const std::string text(positive);
    EXPECT_FALSE(text.empty());
    const char* negative = hmr_strerror(-code);
    ASSERT_NE(negative, nullptr);
    EXPECT_EQ(text, std::string(negative)) << "sign changes the text";
    EXPECT_TRUE(texts.insert(text).second) << "text shared with another code: " << text;
  }
}

TEST(BadArgsStrerror, UnknownCodes) {
  for (const int code : {3, -3, 200, -200, 258, -258, 4095, 9999, -9999, INT_MAX, -INT_MAX,
                         INT_MIN}) {
    SCOPED_TRACE("code " + std::to_string(code));
    EXPECT_NE(hmr_strerror(code), nullptr);
  }
}

// ============================================================== Level Zero device ids =====

TEST(BadArgsZeDevice, Bounds) {
  const int kBad[][2] = {{-1, 0},      {0, -1},      {-1, -1},    {0x8000, 0},
                         {0, 0x10000}, {INT_MIN, 0}, {0, INT_MAX}, {INT_MAX, 0}};
  for (const auto& pair : kBad) {
    SCOPED_TRACE("driver " + std::to_string(pair[0]) + " device " + std::to_string(pair[1]));
    EXPECT_HMR_ERROR(hmr_hmem_ze_device(pair[0], pair[1]), HMR_EINVAL);
  }

  int driver = 42;
  int device = 43;
  for (const int encoded : {-1, INT_MIN, -0x10000}) {
    SCOPED_TRACE("decode " + std::to_string(encoded));
    EXPECT_HMR_ERROR(hmr_hmem_ze_device_decode(encoded, &driver, &device), HMR_EINVAL);
  }
  EXPECT_HMR_ERROR(hmr_hmem_ze_device_decode(0x10002, nullptr, &device), HMR_EINVAL);
  EXPECT_HMR_ERROR(hmr_hmem_ze_device_decode(0x10002, &driver, nullptr), HMR_EINVAL);
  EXPECT_EQ(driver, 42) << "driver written on failure";
  EXPECT_EQ(device, 43) << "device written on failure";
}

TEST(BadArgsZeDevice, RoundTrip) {
  const int kPairs[][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 2}, {3, 0xffff}, {0x7fff, 0}, {0x7fff, 0xffff}};
  for (const auto& pair : kPairs) {
    SCOPED_TRACE("driver " + std::to_string(pair[0]) + " device " + std::to_string(pair[1]));
    const int encoded = hmr_hmem_ze_device(pair[0], pair[1]);
    ASSERT_GE(encoded, 0) << hmr_last_error();
    EXPECT_EQ(encoded, (pair[0] << 16) | pair[1]);
    int driver = -1;
    int device = -1;
    ASSERT_HMR_OK(hmr_hmem_ze_device_decode(encoded, &driver, &device));
    EXPECT_EQ(driver, pair[0]);
    EXPECT_EQ(device, pair[1]);
  }
}

// ============================================================== hmr_version ===============

TEST(BadArgsVersion, MatchesHeader) {
  const uint32_t expected = (static_cast<uint32_t>(HMR_VERSION_MAJOR) << 16) |
                            (static_cast<uint32_t>(HMR_VERSION_MINOR) << 8) |
                            static_cast<uint32_t>(HMR_VERSION_PATCH);
  EXPECT_EQ(hmr_version(), expected);
}

}  // namespace
