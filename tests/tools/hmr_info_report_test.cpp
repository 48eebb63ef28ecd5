// hmr-info's report tree and its two renderings: the JSON writer escapes everything a reason
// or an environment value can hold, and the text report and its summary say what the tree says.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "answer.h"
#include "first_screen.h"
#include "json_value.h"
#include "line_width.h"
#include "summary.h"
#include "text_report.h"

namespace hmr::info {
namespace {

TEST(HmrInfoJson, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_quote("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(json_quote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(json_quote(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(json_quote("\x7f/"), "\"\x7f/\"");  // DEL and '/' need no escape
}

TEST(HmrInfoJson, KeepsUtf8AndReplacesWhatIsNot) {
  EXPECT_EQ(json_quote("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  EXPECT_EQ(json_quote("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(json_quote("\xc0\x80"), "\"\\ufffd\\ufffd\"");          // overlong NUL
  EXPECT_EQ(json_quote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // a UTF-16 surrogate
  EXPECT_EQ(json_quote("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // > U+10FFFF
  EXPECT_EQ(json_quote("ab\xe2\x82"), "\"ab\\ufffd\\ufffd\"");       // cut short at the end
}

TEST(HmrInfoJson, WritesNumbersBooleansAndNull) {
  JsonValue array = JsonValue::array();
  array.push(std::numeric_limits<int64_t>::min());
  array.push(std::numeric_limits<uint64_t>::max());
  array.push(true);
  array.push(JsonValue());
  array.push(0.5);
  array.push(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(array.to_json(0),
            "[-9223372036854775808,18446744073709551615,true,null,0.5,null]");
}

TEST(HmrInfoJson, ObjectsKeepInsertionOrderAndReplaceInPlace) {
  JsonValue object = JsonValue::object();
  object.set("b", 1);
  object.set("a", "x");
  object.set("b", 2);
  EXPECT_EQ(object.to_json(0), "{\"b\":2,\"a\":\"x\"}");
  EXPECT_EQ(object.to_json(2), "{\n  \"b\": 2,\n  \"a\": \"x\"\n}\n");
  EXPECT_EQ(JsonValue::object().to_json(0), "{}");
  EXPECT_EQ(JsonValue::array().to_json(2), "[]\n");
}

TEST(HmrInfoJson, FindsValuesByPath) {
  JsonValue root = JsonValue::object();
  root.set("nics", JsonValue::object()).set("verbs", JsonValue::object()).set("reason", "why");
  ASSERT_NE(root.at("nics.verbs.reason"), nullptr);
  EXPECT_EQ(root.at("nics.verbs.reason")->as_string(), "why");
  EXPECT_EQ(root.at("nics.libfabric"), nullptr);
  EXPECT_EQ(root.at("nics.verbs.reason.deeper"), nullptr);  // a string has no keys
  EXPECT_EQ(JsonValue(3).find("x"), nullptr);
  EXPECT_EQ(JsonValue("7").as_integer(), 0);  // the wrong type reads as nothing, not a crash
}

TEST(HmrInfoJson, AnswersAreRecognised) {
  EXPECT_TRUE(is_answer(answer(false, "why")));
  JsonValue extra = answer(true, "");
  extra.set("more", 1);
  EXPECT_FALSE(is_answer(extra));
  EXPECT_FALSE(is_answer(JsonValue("yes")));
}

// The smallest report the summary reads: no device runtime, no RDMA.
JsonValue bare_report() {
  JsonValue report = JsonValue::object();
  report.set("hmr", JsonValue::object()).set("version", "0.1.0");
  JsonValue& ifaces = report.set("ifaces", JsonValue::array());
  JsonValue system = JsonValue::object();
  system.set("name", "system");
  system.set("loaded", true);
  ifaces.push(std::move(system));
  JsonValue cuda = JsonValue::object();
  cuda.set("name", "cuda");
  cuda.set("loaded", false);
  cuda.set("reason", "cannot load 'libcuda.so.1'");
  ifaces.push(std::move(cuda));
  report.set("devices", JsonValue::array());
  JsonValue& nics = report.set("nics", JsonValue::object());
  JsonValue& modules = nics.set("rdma_modules", JsonValue::object());
  modules.set("ib_core", false);
  modules.set("ib_uverbs", false);
  modules.set("evidence", "no /sys/module/ib_core");
  JsonValue& verbs = nics.set("verbs", JsonValue::object());
  verbs.set("library", "libibverbs.so.1");
  verbs.set("loaded", true);
  verbs.set("reason", "no RDMA devices: ibv_get_device_list failed: Function not implemented");
  verbs.set("devices", JsonValue::array());
  return report;
}

TEST(HmrInfoSummary, SaysThereIsNoGpuAndNoRdmaDevice) {
  const std::vector<std::string> lines = summary_lines(bare_report());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0], "No GPU: no device runtime is loaded:\n  cuda: cannot load 'libcuda.so.1'");
  EXPECT_EQ(lines[1],
            "No RDMA device: ibv_get_device_list failed: Function not implemented (no RDMA "
            "kernel support: no /sys/module/ib_core)");
}

TEST(HmrInfoSummary, CountsDevicesAndTheirAnswers) {
  JsonValue report = bare_report();
  JsonValue cuda = JsonValue::object();
  cuda.set("name", "cuda");
  cuda.set("loaded", true);
  cuda.set("library", "/fake/libcuda.so.1");
  cuda.set("version", "12.8");
  JsonValue ifaces = JsonValue::array();
  ifaces.push(cuda);
  report.set("ifaces", std::move(ifaces));
  JsonValue devices = JsonValue::array();
  for (bool dmabuf : {true, false}) {
    JsonValue device = JsonValue::object();
    device.set("iface", "cuda");
    device.set("dmabuf", answer(dmabuf, dmabuf ? "" : "no"));
    device.set("p2p", answer(dmabuf, ""));
    devices.push(std::move(device));
  }
  report.set("devices", std::move(devices));
  const std::vector<std::string> lines = summary_lines(report);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "Devices: cuda: 2 device(s) (/fake/libcuda.so.1, version 12.8); dma-buf "
                      "export on 1, direct NIC access (P2P) on 1");
}

// The six memory-operation answers of one NIC; `available` lists the keys answered yes.
JsonValue operations(std::initializer_list<const char*> available) {
  JsonValue result = JsonValue::object();
  for (const char* key : {"rereg", "memory_windows", "odp", "implicit_odp", "advise", "indirect"}) {
    bool yes = false;
    for (const char* name : available) yes = yes || std::string(name) == key;
    result.set(key, answer(yes, yes ? "" : "not here"));
  }
  return result;
}

TEST(HmrInfoSummary, SaysWhichMemoryOperationsEachNicHas) {
  JsonValue report = bare_report();
  JsonValue& nics = report.set("nics", JsonValue::object());
  JsonValue& verbs = nics.set("verbs", JsonValue::object());
  JsonValue devices = JsonValue::array();
  JsonValue mlx = JsonValue::object();
  mlx.set("name", "mlx5_0");
  mlx.set("operations", operations({"rereg", "memory_windows", "odp", "implicit_odp", "advise"}));
  devices.push(std::move(mlx));
  JsonValue efa = JsonValue::object();
  efa.set("name", "efa_0");
  efa.set("operations", operations({"rereg"}));
  devices.push(std::move(efa));
  verbs.set("devices", std::move(devices));
  JsonValue& libfabric = nics.set("libfabric", JsonValue::object());
  JsonValue providers = JsonValue::array();
  for (const char* name : {"tcp", "shm"}) {
    JsonValue provider = JsonValue::object();
    provider.set("name", name);
    provider.set("operations", operations({}));
    providers.push(std::move(provider));
  }
  libfabric.set("providers", std::move(providers));
  nics.set("sim", JsonValue::object())
      .set("operations", operations({"rereg", "memory_windows", "odp", "implicit_odp", "advise",
                                     "indirect"}));
  nics.set("callback", JsonValue::object()).set("operations", operations({}));

  const std::vector<std::string> lines = summary_lines(report);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(),
            "Memory operations: sim: all; callback: none; verbs mlx5_0: all but indirect keys; "
            "verbs efa_0: rereg; ofi (every provider): none");

  // Providers that answer differently are listed one by one.
  JsonValue tcp = JsonValue::object();
  tcp.set("name", "tcp");
  tcp.set("operations", operations({"rereg", "odp"}));
  JsonValue mixed = JsonValue::array();
  mixed.push(std::move(tcp));
  JsonValue shm = JsonValue::object();
  shm.set("name", "shm");
  shm.set("operations", operations({}));
  mixed.push(std::move(shm));
  nics.set("libfabric", JsonValue::object()).set("providers", std::move(mixed));
  const std::string last = summary_lines(report).back();
  EXPECT_NE(last.find("; ofi tcp: rereg, ODP; ofi shm: none"), std::string::npos) << last;
}

TEST(HmrInfoText, RendersSectionsAnswersAndTitledElements) {
  JsonValue report = bare_report();
  JsonValue device = JsonValue::object();
  device.set("name", "cuda 0");
  device.set("pci_bus_id", JsonValue());
  device.set("dmabuf", answer(true, ""));
  device.set("peer_direct", answer(false, "no peer-memory client"));
  JsonValue devices = JsonValue::array();
  devices.push(std::move(device));
  report.set("devices", std::move(devices));
  const std::string text = render_text(report);
  EXPECT_EQ(text.rfind("hmr 0.1.0 on this machine", 0), 0u) << text;
  EXPECT_NE(text.find("\n\nSummary, each reason in full\n  No GPU: "), std::string::npos) << text;
  EXPECT_NE(text.find("\nDevices\n  cuda 0\n    pci_bus_id:  -\n    dmabuf:      yes\n"
                      "    peer_direct: no: no peer-memory client\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nMemory interfaces (ifaces)\n  system\n    loaded: yes\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    devices: none\n"), std::string::npos) << text;
}

TEST(HmrInfoWidth, WrapsAtSpacesCutsLongWordsAndHidesControlCharacters) {
  EXPECT_EQ(wrap("one two three", 9, "", "  "),
            (std::vector<std::string>{"one two", "  three"}));
  EXPECT_EQ(wrap("abcdefghij", 4, "", ""), (std::vector<std::string>{"abcd", "efgh", "ij"}));
  EXPECT_EQ(wrap("", 10, "> ", ""), (std::vector<std::string>{"> "}));
  EXPECT_EQ(printable("a\tb\x1b[2Jc"), "a?b?[2Jc");
  EXPECT_EQ(columns("caf\xc3\xa9"), 4u);  // UTF-8: one column per character
  for (const std::string& line :
       wrap(std::string(500, 'x') + " " + std::string(150, 'y'), kScreenWidth, "  ", "    ")) {
    EXPECT_LE(columns(line), kScreenWidth) << line;
  }
}

// The first screen promised 100 columns with control characters shown as '?', but counted a
// column per UTF-8 lead byte (a wide character takes two) and replaced only C0 and DEL (C1's
// CSI, U+009B, starts an escape sequence too; a byte that is not UTF-8 reached the terminal).
TEST(HmrInfoWidth, ReplacesC1ControlsAndBytesThatAreNotUtf8) {
  EXPECT_EQ(printable("a\xc2\x9b" "31mb"), "a?31mb");  // CSI
  EXPECT_EQ(printable("\xc2\x85\xc2\x80\xc2\x9f"), "???");  // NEL and C1's ends
  EXPECT_EQ(printable("\x7f\x1b"), "??");
  EXPECT_EQ(printable("\xff\xfe"), "??");
  EXPECT_EQ(printable("\xc0\xaf"), "??");          // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "???");     // a UTF-16 surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "????");  // past U+10FFFF
  EXPECT_EQ(printable("ab\xe2\x82"), "ab??");      // cut short at the end
  EXPECT_EQ(printable("\x80x"), "?x");             // a stray continuation byte
  const std::string kept = "caf\xc3\xa9 \xc2\xa0 \xe6\xbc\xa2 \xf0\x9f\x98\x80";
  EXPECT_EQ(printable(kept), kept);
  EXPECT_EQ(columns("\xff\xfe"), 2u);   // what is printed: two '?'
  EXPECT_EQ(columns("\xc2\x9b"), 1u);
}

TEST(HmrInfoWidth, CountsEastAsianWideCharactersAsTwoColumns) {
  EXPECT_EQ(columns("\xe6\xbc\xa2"), 2u);              // U+6F22, a CJK ideograph
  EXPECT_EQ(columns("\xea\xb0\x80"), 2u);              // U+AC00, Hangul
  EXPECT_EQ(columns("\xef\xbc\xa1"), 2u);              // U+FF21, fullwidth A
  EXPECT_EQ(columns("\xef\xbd\xb1"), 1u);              // U+FF71, halfwidth katakana
  EXPECT_EQ(columns("\xf0\x9f\x98\x80"), 2u);          // U+1F600, an emoji
  EXPECT_EQ(columns("\xf0\xa0\x80\x80"), 2u);          // U+20000, CJK extension B
  EXPECT_EQ(columns("caf\xc3\xa9"), 4u);
  std::string wide;
  for (int i = 0; i < 150; ++i) wide += "\xe6\xbc\xa2";
  const std::vector<std::string> lines = wrap("FI_HMEM='" + wide + "'", kScreenWidth, "  ", "    ");
  ASSERT_GE(lines.size(), 3u);
  for (const std::string& line : lines) {
    EXPECT_LE(columns(line), kScreenWidth) << line;
    EXPECT_EQ(printable(line), line) << "a character was cut: " << line;
  }
  EXPECT_EQ(columns(lines[1]), kScreenWidth);  // 4 + 48 wide characters
}

// --full printed values as they were: an escape sequence in a variable reached the terminal.
TEST(HmrInfoText, TheFullReportShowsEveryValuePrintable) {
  JsonValue report = bare_report();
  JsonValue& config = report.set("config", JsonValue::object());
  config.set("set", JsonValue::object()).set("FI_HMEM", "a\x1b[31m\xc2\x9b\xffz\tq");
  config.set("errors", JsonValue::array()).push("FI_HMEM='\x1b]0;title\x07': unknown");
  const std::string text = render_text(report);
  EXPECT_NE(text.find("FI_HMEM: a?[31m??z?q\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  errors: FI_HMEM='?]0;title?': unknown\n"), std::string::npos) << text;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = text.substr(start, end - start);
    EXPECT_EQ(printable(line), line);
  }
}

// A libfabric section as the probe writes it: tcp's row and its layered form reach the same
// provider, udp's row offers nothing itself.
JsonValue provider_row(const char* name, const char* use, const char* resolves_to) {
  JsonValue row = JsonValue::object();
  row.set("name", name);
  row.set("use", use != nullptr ? JsonValue(use) : JsonValue());
  row.set("resolves_to", resolves_to != nullptr ? JsonValue(resolves_to) : JsonValue());
  row.set("rma", answer(use != nullptr, use != nullptr ? "works" : "finds nothing"));
  return row;
}

JsonValue working_report() {
  JsonValue report = bare_report();
  JsonValue& nics = report.set("nics", JsonValue::object());
  JsonValue& modules = nics.set("rdma_modules", JsonValue::object());
  modules.set("ib_core", false);
  modules.set("ib_uverbs", false);
  nics.set("verbs", JsonValue::object()).set("loaded", true);
  JsonValue& libfabric = nics.set("libfabric", JsonValue::object());
  libfabric.set("loaded", true);
  JsonValue providers = JsonValue::array();
  providers.push(provider_row("tcp;ofi_rxm", "provider=tcp", "tcp;ofi_rxm"));
  providers.push(provider_row("sockets", "provider=sockets", "sockets"));
  providers.push(provider_row("udp", nullptr, nullptr));
  providers.push(provider_row("shm", "provider=shm", "shm"));
  providers.push(provider_row("tcp", "provider=tcp", "tcp;ofi_rxm"));
  libfabric.set("providers", std::move(providers));
  nics.set("sim", JsonValue::object()).set("operations", operations({"rereg"}));
  JsonValue& config = report.set("config", JsonValue::object());
  config.set("environment", answer(true, "hmr_domain_open accepts every variable"));
  config.set("set", JsonValue::object());
  config.set("errors", JsonValue::array());
  report.set("monitors", JsonValue::object())
      .set("chosen", JsonValue::object())
      .set("name", "memhooks");
  return report;
}

TEST(HmrInfoFirstScreen, SaysWhatToUseAndPassWithTheProvidersToPrefer) {
  const JsonValue summary = first_screen(working_report());
  ASSERT_NE(summary.find("use"), nullptr);
  // tcp first (the portable one), each provider once, by the name to pass.
  EXPECT_EQ(summary.find("use")->as_string(),
            "nic=ofi with provider tcp or shm, or nic=sim (hmr's software NIC, to try hmr out)");
  ASSERT_EQ(summary.find("pass")->size(), 2u);
  EXPECT_EQ(summary.find("pass")->items()[0].as_string(),
            "attr.nic = \"ofi\", attr.nic_options = \"provider=tcp\" (libfabric serves it as "
            "tcp;ofi_rxm)");
  // GPU and verbs are missing, each with one thing to do.
  ASSERT_EQ(summary.find("missing")->size(), 2u);
  EXPECT_EQ(summary.find("missing")->items()[0].find("what")->as_string(), "GPU memory");
  EXPECT_NE(summary.find("missing")->items()[1].find("fix")->as_string().find("provider tcp"),
            std::string::npos);
  for (const JsonValue& line : summary.find("lines")->items()) {
    EXPECT_LE(columns(line.as_string()), kScreenWidth) << line.as_string();
  }
}

TEST(HmrInfoFirstScreen, ARefusedSettingComesFirstAndNothingIsOffered) {
  JsonValue report = working_report();
  JsonValue& config = report.set("config", JsonValue::object());
  config.set("environment", answer(false, "hmr_domain_open fails: HMR_REG_THREADS=0: use 1 to 256"));
  config.set("set", JsonValue::object()).set("HMR_REG_THREADS", "0");
  config.set("errors", JsonValue::array()).push("HMR_REG_THREADS=0: use 1 to 256");
  const JsonValue summary = first_screen(report);
  EXPECT_EQ(summary.find("use")->as_string().rfind("nothing until", 0), 0u);
  EXPECT_EQ(summary.find("pass")->size(), 0u);
  const std::string screen = render_first_screen(report);
  EXPECT_NE(screen.find("  setting: HMR_REG_THREADS=0: use 1 to 256\n"), std::string::npos)
      << screen;
}

// FI_MR_CACHE_MAX_COUNT=0 or FI_MR_CACHE_MAX_SIZE=0 turns every cache off, whatever monitor
// would start: the Cache line says none, and why, and the one thing to do.
TEST(HmrInfoFirstScreen, ACacheTurnedOffByALimitReadsNone) {
  JsonValue report = working_report();
  JsonValue& chosen = report.set("monitors", JsonValue::object()).set("chosen", JsonValue::object());
  chosen.set("name", JsonValue());
  chosen.set("source", "FI_MR_CACHE_MAX_SIZE");
  chosen.set("reason", "no registration is cached: FI_MR_CACHE_MAX_SIZE is 0, which turns the "
                       "cache off");
  JsonValue& config = report.set("config", JsonValue::object());
  config.set("environment", answer(true, "hmr_domain_open accepts every variable"));
  config.set("set", JsonValue::object()).set("FI_MR_CACHE_MAX_SIZE", "0");
  config.set("errors", JsonValue::array());
  const JsonValue summary = first_screen(report);
  EXPECT_EQ(summary.find("cache")->as_string(),
            "none: FI_MR_CACHE_MAX_SIZE=0 turns the registration cache off");
  const JsonValue& last = summary.find("missing")->items().back();
  EXPECT_EQ(last.find("what")->as_string(), "registration cache");
  EXPECT_EQ(last.find("fix")->as_string(),
            "unset FI_MR_CACHE_MAX_SIZE (or set it above 0) to cache registrations");
}

}  // namespace
}  // namespace hmr::info
