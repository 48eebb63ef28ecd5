// Conformance with libfabric, checked against libfabric itself (docs/semantics.md, "Where hmr
// differs from libfabric").  The same registration calls go to raw fi_mr_reg / fi_mr_regv /
// fi_mr_regattr on a libfabric domain and to hmr_mr_reg / hmr_mr_regv / hmr_mr_regattr on an
// hmr domain over the same provider (tcp, tcp;ofi_rxm, shm), in one process.  Where the two
// disagree — one succeeds and the other fails, or both fail with different codes — the case
// must be listed in that section of docs/semantics.md with its reason; the test fails on any
// difference the list does not name, and on a listed case that no longer differs anywhere.
//
// hmr's error codes are libfabric's numbers (HMR_EINVAL = FI_EINVAL, HMR_ENOKEY = FI_ENOKEY,
// ...), so codes compare directly.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/api/test_support.h"
#include "tests/nic/ofi_test_fabric.h"

namespace hmr_ofi_test {
namespace {

constexpr size_t kPage = 4096;
// libfabric 1.20's FI_MR_DMABUF (rdma/fi_domain.h); 1.17's headers do not have it.
constexpr uint64_t kFiMrDmabuf = 1ULL << 40;

// One registration call, as both sides make it.
struct Call {
  enum class Entry { reg, regv, regattr };
  std::string name;
  Entry entry = Entry::reg;
  std::vector<iovec> iov;
  size_t count = SIZE_MAX;  // SIZE_MAX: iov.size()
  bool null_iov = false;
  uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  uint64_t offset = 0;
  uint64_t requested_key = 0;
  uint64_t flags = 0;
  // Registered first, on both sides, and kept open while the call is made (a duplicate key).
  bool after_key_in_use = false;
  size_t iov_count() const { return count != SIZE_MAX ? count : iov.size(); }
};

// Memory the calls point into: 16 MiB + a page, mapped and touched, and a range that was
// mapped and is not any more.
struct Arena {
  Arena() {
    base = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    std::memset(base, 1, kBytes);
    unmapped = static_cast<uint8_t*>(mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    munmap(unmapped, 4 * kPage);
  }
  ~Arena() { munmap(base, kBytes); }
  static constexpr size_t kBytes = (16u << 20) + kPage;
  uint8_t* base;
  uint8_t* unmapped;
};

std::vector<Call> calls(const Arena& arena, size_t iov_limit, bool provider_keys) {
  std::vector<Call> out;
  uint8_t* buf = arena.base;
  auto add = [&](Call call) { out.push_back(std::move(call)); };
  // Every combination of the six access bits, none included (fabtests unit/mr_test.c).
  const uint64_t bits[] = {FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE};
  for (unsigned mask = 0; mask < 64; ++mask) {
    Call call;
    char name[32];
    std::snprintf(name, sizeof name, "access_%02x", mask);
    call.name = name;
    call.iov = {{buf, kPage}};
    call.access = 0;
    for (unsigned b = 0; b < 6; ++b) {
      if (mask & (1u << b)) call.access |= bits[b];
    }
    add(call);
  }
  for (size_t size : {size_t{0}, size_t{1}, kPage - 1, kPage, size_t{(1u << 20) + 3},
                      size_t{16u << 20}}) {
    Call call;
    call.name = "size_" + std::to_string(size);
    call.iov = {{buf + 8, size}};
    add(call);
  }
  // Segments: regv with 0, 1, the provider's limit and one more.
  for (size_t count : {size_t{0}, size_t{1}, iov_limit, iov_limit + 1}) {
    Call call;
    call.name = count == iov_limit + 1 ? "regv_over_limit" : "regv_" + std::to_string(count);
    if (count == iov_limit && count <= 1) continue;  // the same as regv_1
    call.entry = Call::Entry::regv;
    for (size_t i = 0; i < count; ++i) call.iov.push_back({buf + i * 2 * kPage, kPage});
    add(call);
  }
  {
    Call call;
    call.name = "regv_null_iov";
    call.entry = Call::Entry::regv;
    call.null_iov = true;
    call.count = 1;
    add(call);
  }
  for (Call::Entry entry : {Call::Entry::reg, Call::Entry::regattr}) {
    const std::string prefix = entry == Call::Entry::reg ? "reg_" : "regattr_";
    Call call;
    call.entry = entry;
    call.iov = {{buf, kPage}};
    call.name = prefix + "plain";
    add(call);
    call.name = prefix + "offset";
    call.offset = 4096;
    add(call);
    call.offset = 0;
    call.name = prefix + "unknown_flag";
    call.flags = 1ULL << 20;
    add(call);
    call.name = prefix + "rma_event";
    call.flags = FI_RMA_EVENT;
    add(call);
    call.flags = 0;
    call.name = prefix + "unknown_access";
    call.access |= 1ULL << 30;
    add(call);
  }
  {
    Call call;
    call.entry = Call::Entry::regattr;
    call.iov = {{buf, kPage}};
    call.name = "regattr_dmabuf_without_dmabuf";
    call.flags = kFiMrDmabuf;
    add(call);
  }
  // Buffers: NULL, NULL of length 0, unmapped, wrapping the address space, length SIZE_MAX.
  for (auto [name, address, length] :
       std::initializer_list<std::tuple<const char*, void*, size_t>>{
           {"null_buffer", nullptr, kPage},
           {"null_buffer_length_0", nullptr, 0},
           {"unmapped_buffer", arena.unmapped, kPage},
           {"wrapping_range", reinterpret_cast<void*>(UINTPTR_MAX - 100), kPage},
           {"length_size_max", buf, SIZE_MAX}}) {
    Call call;
    call.name = name;
    call.iov = {{address, length}};
    add(call);
  }
  // Requested keys (domains without FI_MR_PROV_KEY use them; others ignore them).
  {
    Call call;
    call.iov = {{buf, kPage}};
    call.name = provider_keys ? "requested_key_ignored" : "requested_key_fresh";
    call.requested_key = 0x1234;
    add(call);
    if (!provider_keys) {
      call.name = "requested_key_duplicate";
      call.after_key_in_use = true;
      add(call);
      call.name = "requested_key_notavail";  // ~0: FI_KEY_NOTAVAIL, HMR_KEY_NOTAVAIL
      call.after_key_in_use = false;
      call.requested_key = ~uint64_t{0};
      add(call);
    }
  }
  return out;
}

// Raw libfabric: what an application calling fi_mr_* gets.
int raw_call(fid_domain* domain, const Call& call, fid_mr** mr) {
  const iovec* iov = call.null_iov ? nullptr : call.iov.data();
  switch (call.entry) {
    case Call::Entry::reg:
      return fi_mr_reg(domain, iov[0].iov_base, iov[0].iov_len, call.access, call.offset,
                       call.requested_key, call.flags, mr, nullptr);
    case Call::Entry::regv:
      return fi_mr_regv(domain, iov, call.iov_count(), call.access, call.offset,
                        call.requested_key, call.flags, mr, nullptr);
    case Call::Entry::regattr: {
      fi_mr_attr attr{};
      attr.mr_iov = iov;
      attr.iov_count = call.iov_count();
      attr.access = call.access;
      attr.offset = call.offset;
      attr.requested_key = call.requested_key;
      attr.iface = FI_HMEM_SYSTEM;
      return fi_mr_regattr(domain, &attr, call.flags, mr);
    }
  }
  return -FI_EINVAL;
}

// hmr: the same arguments through its C ABI.
int hmr_call(hmr_domain* domain, const Call& call, hmr_mr** mr) {
  const iovec* iov = call.null_iov ? nullptr : call.iov.data();
  switch (call.entry) {
    case Call::Entry::reg:
      return hmr_mr_reg(domain, iov[0].iov_base, iov[0].iov_len, call.access, call.offset,
                        call.requested_key, call.flags, mr, nullptr);
    case Call::Entry::regv:
      return hmr_mr_regv(domain, iov, call.iov_count(), call.access, call.offset,
                         call.requested_key, call.flags, mr, nullptr);
    case Call::Entry::regattr: {
      hmr_mr_attr attr{};
      attr.size = sizeof attr;
      attr.mr_iov = iov;
      attr.iov_count = call.iov_count();
      attr.access = call.access;
      attr.offset = call.offset;
      attr.requested_key = call.requested_key;
      attr.iface = HMR_HMEM_SYSTEM;
      return hmr_mr_regattr(domain, &attr, call.flags, mr);
    }
  }
  return -HMR_EINVAL;
}

// The cases docs/semantics.md lists under "Where hmr differs from libfabric": the names that
// open a line of that section, "- `name`, `other`: reason" (up to the next "## " heading).
std::set<std::string> documented_differences() {
  std::ifstream doc(HMR_SOURCE_DIR "/docs/semantics.md");
  std::set<std::string> names;
  bool inside = false;
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Where hmr differs from libfabric";
    if (!inside || line.rfind("- `", 0) != 0) continue;
    // "- `a`, `b`: reason": every name before the colon.
    size_t at = 2;
    while (at < line.size() && line[at] == '`') {
      const size_t end = line.find('`', at + 1);
      if (end == std::string::npos) break;
      names.insert(line.substr(at + 1, end - at - 1));
      at = end + 1;
      if (line.compare(at, 2, ", ") == 0) at += 2;
    }
  }
  return names;
}

// What raw libfabric did when the call killed the process (it checks few arguments).
constexpr int kCrashed = INT32_MIN;

struct Outcome {
  int raw = 0;
  int hmr = 0;
  bool differs() const { return raw != hmr; }
};

std::string describe(int rc) {
  if (rc == kCrashed) return "crashed";
  return rc == 0 ? "ok" : std::to_string(rc) + " " + fi_strerror(-rc);
}

// The raw call (after `held`, a registration kept open meanwhile, if any), made in a forked
// child: libfabric dereferences some arguments hmr refuses (a NULL iov), and a crash is an
// answer too.  The child's return code comes back through a pipe.
int raw_outcome(fid_domain* domain, const Call& call, const Call* held) {
  int channel[2];
  if (pipe(channel) != 0) return -FI_EIO;
  std::fflush(stdout);  // (or the child's exit would print it twice)
  const pid_t child = fork();
  if (child == 0) {
    close(channel[0]);
    for (int signal_number : {SIGSEGV, SIGBUS, SIGABRT}) signal(signal_number, SIG_DFL);
    fid_mr* first = nullptr;
    if (held != nullptr && raw_call(domain, *held, &first) != 0) _exit(3);
    fid_mr* mr = nullptr;
    const int rc = raw_call(domain, call, &mr);
    if (rc == 0 && mr != nullptr && fi_close(&mr->fid) != 0) _exit(4);
    if (first != nullptr) fi_close(&first->fid);
    _exit(write(channel[1], &rc, sizeof rc) == sizeof rc ? 0 : 5);
  }
  close(channel[1]);
  int rc = kCrashed;
  const bool got = read(channel[0], &rc, sizeof rc) == sizeof rc;
  close(channel[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    EXPECT_TRUE(WIFSIGNALED(status)) << call.name << ": the raw child failed (exit "
                                     << WEXITSTATUS(status) << ")";
    return kCrashed;
  }
  return rc;
}

void run_operations(const ProviderChoice& choice, fid_domain* raw_domain, hmr_domain* domain,
                    void* buffer, std::map<std::string, Outcome>* outcomes);

// Runs every call on both sides of one provider; the outcomes by case name.
std::map<std::string, Outcome> run_provider(const ProviderChoice& choice) {
  std::map<std::string, Outcome> outcomes;
  AppDomain raw(choice);
  AppDomain wrapped(choice);
  if (!raw || !wrapped) return outcomes;
  const fi_info* info = raw.info();
  const uint64_t mode = static_cast<uint64_t>(info->domain_attr->mr_mode);
  hmr_domain_attr attr{};
  attr.size = sizeof attr;
  attr.nic = "ofi";
  const std::string options = wrapped.wrap_options();
  attr.nic_options = options.c_str();
  attr.nic_handle = wrapped.domain();
  attr.mr_mode = mode;  // what the application supports: what the provider asked for
  hmr_domain* domain = nullptr;
  if (hmr_domain_open(&attr, &domain) != 0) {
    ADD_FAILURE() << choice.provider << ": hmr_domain_open: " << hmr_last_error();
    return outcomes;
  }
  const size_t iov_limit = info->domain_attr->mr_iov_limit;
  Arena arena;
  for (const Call& call : calls(arena, iov_limit, (mode & FI_MR_PROV_KEY) != 0)) {
    Call first = call;  // a registration of the same key kept open meanwhile
    first.iov = {{arena.base + 64 * kPage, kPage}};
    hmr_mr* held_hmr = nullptr;
    if (call.after_key_in_use) {
      EXPECT_EQ(hmr_call(domain, first, &held_hmr), 0) << hmr_last_error();
    }
    Outcome outcome;
    outcome.raw = raw_outcome(raw.domain(), call, call.after_key_in_use ? &first : nullptr);
    hmr_mr* hmr_mr_handle = nullptr;
    outcome.hmr = hmr_call(domain, call, &hmr_mr_handle);
    if (outcome.hmr == 0) {
      EXPECT_EQ(hmr_mr_close(hmr_mr_handle), 0) << call.name;
    }
    if (held_hmr != nullptr) hmr_mr_close(held_hmr);
    outcomes[call.name] = outcome;
    if (std::getenv("HMR_CONFORMANCE_VERBOSE") != nullptr) {
      std::printf("%-12s %-32s raw=%-28s hmr=%s\n", choice.provider, call.name.c_str(),
                  describe(outcome.raw).c_str(), describe(outcome.hmr).c_str());
    }
  }
  run_operations(choice, raw.domain(), domain, arena.base + 128 * kPage, &outcomes);
  EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
  return outcomes;
}

// The operations on a registered MR, the same on both sides: raw_attr with room for the key
// and with none, map_raw of what raw_attr gave, unmap_key of a key never mapped, enable of an
// MR (needed only by FI_MR_ENDPOINT providers), refresh of its range (FI_MR_MMU_NOTIFY).
// Each returns the call's code; the name says which.
struct Operation {
  const char* name;
  int (*raw)(fid_domain*, fid_mr*, void*);
  int (*hmr)(hmr_domain*, hmr_mr*, void*);
};

int raw_raw_attr(fid_domain*, fid_mr* mr, void*) {
  uint64_t base = 0;
  uint8_t key[64];
  size_t size = sizeof key;
  return fi_mr_raw_attr(mr, &base, key, &size, 0);
}
int hmr_raw_attr(hmr_domain*, hmr_mr* mr, void*) {
  uint64_t base = 0;
  uint8_t key[64];
  size_t size = sizeof key;
  return hmr_mr_raw_attr(mr, &base, key, &size, 0);
}
int raw_raw_attr_small(fid_domain*, fid_mr* mr, void*) {
  uint64_t base = 0;
  uint8_t key[1];
  size_t size = 0;
  return fi_mr_raw_attr(mr, &base, key, &size, 0);
}
int hmr_raw_attr_small(hmr_domain*, hmr_mr* mr, void*) {
  uint64_t base = 0;
  uint8_t key[1];
  size_t size = 0;
  return hmr_mr_raw_attr(mr, &base, key, &size, 0);
}
int raw_map_raw(fid_domain* domain, fid_mr* mr, void*) {
  uint64_t base = 0;
  uint8_t key[64];
  size_t size = sizeof key;
  if (fi_mr_raw_attr(mr, &base, key, &size, 0) != 0) return 1;  // (not comparable: see raw_attr)
  uint64_t mapped = 0;
  const int rc = fi_mr_map_raw(domain, base, key, size, &mapped, 0);
  if (rc == 0) fi_mr_unmap_key(domain, mapped);
  return rc;
}
int hmr_map_raw(hmr_domain* domain, hmr_mr* mr, void*) {
  uint64_t base = 0;
  uint8_t key[64];
  size_t size = sizeof key;
  if (hmr_mr_raw_attr(mr, &base, key, &size, 0) != 0) return 1;
  uint64_t mapped = 0;
  const int rc = hmr_mr_map_raw(domain, base, key, size, &mapped, 0);
  if (rc == 0) hmr_mr_unmap_key(domain, mapped);
  return rc;
}
int raw_unmap_unknown(fid_domain* domain, fid_mr*, void*) { return fi_mr_unmap_key(domain, 0xdead); }
int hmr_unmap_unknown(hmr_domain* domain, hmr_mr*, void*) { return hmr_mr_unmap_key(domain, 0xdead); }
int raw_enable(fid_domain*, fid_mr* mr, void*) { return fi_mr_enable(mr); }
int hmr_enable(hmr_domain*, hmr_mr* mr, void*) { return hmr_mr_enable(mr); }
int raw_refresh(fid_domain*, fid_mr* mr, void* buffer) {
  const iovec iov{buffer, kPage};
  return fi_mr_refresh(mr, &iov, 1, 0);
}
int hmr_refresh(hmr_domain*, hmr_mr* mr, void* buffer) {
  const iovec iov{buffer, kPage};
  return hmr_mr_refresh(mr, &iov, 1, 0);
}

const Operation kOperations[] = {
    {"op_raw_attr", raw_raw_attr, hmr_raw_attr},
    {"op_raw_attr_no_room", raw_raw_attr_small, hmr_raw_attr_small},
    {"op_map_raw", raw_map_raw, hmr_map_raw},
    {"op_unmap_unknown_key", raw_unmap_unknown, hmr_unmap_unknown},
    {"op_enable", raw_enable, hmr_enable},
    {"op_refresh", raw_refresh, hmr_refresh},
};

// Each operation on a plain page registered on both sides; the raw side in a child, as above.
void run_operations(const ProviderChoice& choice, fid_domain* raw_domain, hmr_domain* domain,
                    void* buffer, std::map<std::string, Outcome>* outcomes) {
  Call plain;
  plain.iov = {{buffer, kPage}};
  for (const Operation& op : kOperations) {
    Outcome outcome;
    int channel[2];
    ASSERT_EQ(pipe(channel), 0);
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      close(channel[0]);
      fid_mr* mr = nullptr;
      if (raw_call(raw_domain, plain, &mr) != 0) _exit(3);
      const int rc = op.raw(raw_domain, mr, buffer);
      fi_close(&mr->fid);
      _exit(write(channel[1], &rc, sizeof rc) == sizeof rc ? 0 : 5);
    }
    close(channel[1]);
    outcome.raw = kCrashed;
    if (read(channel[0], &outcome.raw, sizeof outcome.raw) != sizeof outcome.raw) {
      outcome.raw = kCrashed;
    }
    close(channel[0]);
    int status = 0;
    waitpid(child, &status, 0);
    hmr_mr* mr = nullptr;
    ASSERT_EQ(hmr_call(domain, plain, &mr), 0) << hmr_last_error();
    outcome.hmr = op.hmr(domain, mr, buffer);
    EXPECT_EQ(hmr_mr_close(mr), 0) << op.name << ": " << hmr_last_error();
    (*outcomes)[op.name] = outcome;
    if (std::getenv("HMR_CONFORMANCE_VERBOSE") != nullptr) {
      std::printf("%-12s %-32s raw=%-28s hmr=%s\n", choice.provider, op.name,
                  describe(outcome.raw).c_str(), describe(outcome.hmr).c_str());
    }
  }
}

TEST(OfiConformance, HmrRegistersAsLibfabricDoesOrTheDifferenceIsDocumented) {
  const std::set<std::string> documented = documented_differences();
  ASSERT_FALSE(documented.empty()) << "docs/semantics.md has no \"Where hmr differs from "
                                      "libfabric\" list";
  std::set<std::string> seen_differing;
  const ProviderChoice providers[] = {tcp_loopback(), {"tcp;ofi_rxm", "lo", "127.0.0.1/32", 0},
                                      shm_choice(0)};
  for (const ProviderChoice& choice : providers) {
    const std::map<std::string, Outcome> outcomes = run_provider(choice);
    ASSERT_FALSE(outcomes.empty()) << choice.provider;
    for (const auto& [name, outcome] : outcomes) {
      if (!outcome.differs()) continue;
      seen_differing.insert(name);
      EXPECT_TRUE(documented.count(name) != 0)
          << choice.provider << ": " << name << ": libfabric " << describe(outcome.raw)
          << ", hmr " << describe(outcome.hmr)
          << " — make them agree, or list the case in docs/semantics.md, \"Where hmr differs "
             "from libfabric\", with the reason";
    }
  }
  for (const std::string& name : documented) {
    if (name.find(':') != std::string::npos) continue;  // sim: and callback: entries
    EXPECT_TRUE(seen_differing.count(name) != 0)
        << name << " is listed as a difference, but hmr and libfabric agree on it everywhere: "
                   "take it off the list";
  }
}


// hmr's answers to the registration calls on one of its own NICs (sim, callback), with the
// NIC's own limits; the outcomes by case name (hmr side only).
std::map<std::string, int> run_hmr_nic(hmr_domain_attr attr, const Arena& arena) {
  std::map<std::string, int> answers;
  hmr_domain* domain = nullptr;
  if (hmr_domain_open(&attr, &domain) != 0) {
    ADD_FAILURE() << attr.nic << ": hmr_domain_open: " << hmr_last_error();
    return answers;
  }
  for (const Call& call : calls(arena, attr.mr_iov_limit, (attr.mr_mode & HMR_MR_PROV_KEY) != 0)) {
    Call first = call;
    first.iov = {{arena.base + 64 * kPage, kPage}};
    hmr_mr* held = nullptr;
    if (call.after_key_in_use) {
      EXPECT_EQ(hmr_call(domain, first, &held), 0) << hmr_last_error();
    }
    hmr_mr* mr = nullptr;
    answers[call.name] = hmr_call(domain, call, &mr);
    if (answers[call.name] == 0) {
      EXPECT_EQ(hmr_mr_close(mr), 0) << call.name;
    }
    if (held != nullptr) hmr_mr_close(held);
  }
  EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
  return answers;
}

// A callback NIC that registers anything, as libfabric's tcp does: the requested key when
// there is one (duplicates are hmr's to refuse), else a fresh one.
int toy_register(void* context, const hmr_nic_reg_request* request, hmr_nic_mr* mr, char*,
                 size_t) {
  static std::atomic<uint64_t> next{1u << 20};
  mr->handle = context;
  mr->key = request->has_requested_key ? request->requested_key : next.fetch_add(1);
  return 0;
}
int toy_deregister(void*, const hmr_nic_mr*, char*, size_t) { return 0; }

// The same matrix on hmr's sim and callback NICs: their semantics must be the ofi NIC's
// wherever fi_mr(3) defines them, so each answer must be what hmr gives on tcp with the same
// mr_mode, or be listed in docs/semantics.md ("`sim:<case>`", "`callback:<case>`" in "Where
// hmr differs from libfabric") with the reason.
TEST(OfiConformance, TheSimAndCallbackNicsAnswerAsTheOfiNicDoes) {
  const std::set<std::string> documented = documented_differences();
  AppDomain wrapped(tcp_loopback());
  ASSERT_TRUE(wrapped);
  const uint64_t mode = static_cast<uint64_t>(wrapped.info()->domain_attr->mr_mode);
  Arena arena;
  hmr_domain_attr ofi{};
  ofi.size = sizeof ofi;
  ofi.nic = "ofi";
  const std::string options = wrapped.wrap_options();
  ofi.nic_options = options.c_str();
  ofi.nic_handle = wrapped.domain();
  ofi.mr_mode = mode;
  ofi.mr_iov_limit = 1;  // the callback NIC's: one range per callback
  const std::map<std::string, int> reference = run_hmr_nic(ofi, arena);
  ASSERT_FALSE(reference.empty());

  hmr_nic_callbacks callbacks{};
  callbacks.size = sizeof callbacks;
  callbacks.context = &callbacks;
  callbacks.key_size = 8;
  callbacks.reg_va = toy_register;
  callbacks.dereg = toy_deregister;
  hmr_domain_attr sim = ofi;
  sim.nic = "sim";
  sim.nic_options = "iov_limit=1";
  sim.nic_handle = nullptr;
  hmr_domain_attr callback = ofi;
  callback.nic = "callback";
  callback.nic_options = nullptr;
  callback.nic_handle = &callbacks;
  std::set<std::string> seen_differing;
  for (const hmr_domain_attr& attr : {sim, callback}) {
    for (const auto& [name, rc] : run_hmr_nic(attr, arena)) {
      const int expected = reference.at(name);
      if (rc == expected) continue;
      const std::string listed = std::string(attr.nic) + ":" + name;
      seen_differing.insert(listed);
      EXPECT_TRUE(documented.count(listed) != 0)
          << listed << ": the ofi NIC " << describe(expected) << ", " << attr.nic << " "
          << describe(rc) << " — make them agree, or list `" << listed
          << "` in docs/semantics.md with the reason";
    }
  }
  for (const std::string& name : documented) {
    if (name.rfind("sim:", 0) != 0 && name.rfind("callback:", 0) != 0) continue;
    EXPECT_TRUE(seen_differing.count(name) != 0) << name << " no longer differs: take it off the list";
  }
}


// What fabtests' MR unit test (unit/mr_test.c) checks, made through hmr's C ABI on the ofi NIC
// over tcp and shm, and on the sim NIC: every combination of the six access bits, none
// included, at sizes from 1 byte to 8 MiB; regv of 1 to mr_iov_limit segments; regattr; and
// memory freed and allocated again at the same address, registered again.
void fabtests_mr_checks(hmr_domain* domain, size_t iov_limit, const char* where) {
  constexpr size_t kMax = 8u << 20;
  auto* buffer = static_cast<uint8_t*>(mmap(nullptr, kMax, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(buffer, MAP_FAILED);
  std::memset(buffer, 2, kMax);
  const uint64_t bits[] = {HMR_SEND, HMR_RECV, HMR_READ, HMR_WRITE, HMR_REMOTE_READ,
                           HMR_REMOTE_WRITE};
  for (unsigned mask = 0; mask < 64; ++mask) {
    uint64_t access = 0;
    for (unsigned b = 0; b < 6; ++b) {
      if (mask & (1u << b)) access |= bits[b];
    }
    for (size_t size = 1; size <= kMax; size *= 8) {
      hmr_mr* mr = nullptr;
      ASSERT_EQ(hmr_mr_reg(domain, buffer, size, access, 0, mask * 100 + size % 97 + 1, 0, &mr,
                           nullptr),
                0)
          << where << ": access " << access << ", " << size << " bytes: " << hmr_last_error();
      ASSERT_EQ(hmr_mr_close(mr), 0) << hmr_last_error();
    }
  }
  // regv of 1 to mr_iov_limit segments (at most 16), and the same through regattr.
  std::vector<iovec> iov;
  for (size_t count = 1; count <= std::min<size_t>(iov_limit, 16); ++count) {
    iov.push_back({buffer + (count - 1) * 2 * kPage, kPage});
    hmr_mr* mr = nullptr;
    ASSERT_EQ(hmr_mr_regv(domain, iov.data(), iov.size(), HMR_REMOTE_READ | HMR_REMOTE_WRITE, 0,
                          7000 + count, 0, &mr, nullptr),
              0)
        << where << ": regv of " << count << ": " << hmr_last_error();
    ASSERT_EQ(hmr_mr_close(mr), 0);
    hmr_mr_attr attr{};
    attr.size = sizeof attr;
    attr.mr_iov = iov.data();
    attr.iov_count = iov.size();
    attr.access = HMR_REMOTE_READ;
    attr.requested_key = 8000 + count;
    ASSERT_EQ(hmr_mr_regattr(domain, &attr, 0, &mr), 0) << where << ": " << hmr_last_error();
    ASSERT_EQ(hmr_mr_close(mr), 0);
  }
  // Freed and allocated again at the same address: registered again, and what a peer reaches
  // is the new memory (hmr's cache must not hand out the old registration).
  munmap(buffer, kMax);
  for (int round = 0; round < 3; ++round) {
    auto* again = static_cast<uint8_t*>(mmap(buffer, kPage, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                                             -1, 0));
    ASSERT_EQ(again, buffer) << "the address was taken meanwhile";
    again[0] = static_cast<uint8_t>(round);
    hmr_mr* mr = nullptr;
    ASSERT_EQ(hmr_mr_reg(domain, again, kPage, HMR_REMOTE_READ, 0, 9000 + round, 0, &mr, nullptr),
              0)
        << where << ": " << hmr_last_error();
    ASSERT_EQ(hmr_mr_close(mr), 0);
    munmap(again, kPage);
  }
}

TEST(OfiConformance, FabtestsMrUnitChecksPassThroughHmr) {
  for (const ProviderChoice& choice : {tcp_loopback(), shm_choice(0)}) {
    AppDomain wrapped(choice);
    ASSERT_TRUE(wrapped);
    hmr_domain_attr attr{};
    attr.size = sizeof attr;
    attr.nic = "ofi";
    const std::string options = wrapped.wrap_options();
    attr.nic_options = options.c_str();
    attr.nic_handle = wrapped.domain();
    attr.mr_mode = static_cast<uint64_t>(wrapped.info()->domain_attr->mr_mode);
    hmr_domain* domain = nullptr;
    ASSERT_EQ(hmr_domain_open(&attr, &domain), 0) << hmr_last_error();
    fabtests_mr_checks(domain, attr.mr_iov_limit, choice.provider);
    EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
  }
  hmr_domain_attr sim{};
  sim.size = sizeof sim;
  sim.nic = "sim";
  hmr_domain* domain = nullptr;
  ASSERT_EQ(hmr_domain_open(&sim, &domain), 0) << hmr_last_error();
  fabtests_mr_checks(domain, sim.mr_iov_limit, "sim");
  EXPECT_EQ(hmr_domain_close(domain), 0) << hmr_last_error();
}

}  // namespace
}  // namespace hmr_ofi_test
