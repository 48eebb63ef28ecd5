#include "hmem/iface_list.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "hmem/hmem_registry.h"

namespace hmr::hmem {
namespace {

// Device runtimes first come, first asked: CUDA is the most common, and a pointer belongs to
// at most one runtime, so the order only decides how many runtimes a host pointer visits.
constexpr int kDefaultOrder[] = {HMR_HMEM_CUDA, HMR_HMEM_ROCR, HMR_HMEM_ZE, HMR_HMEM_NEURON,
                                 HMR_HMEM_SYNAPSEAI};

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> items;
  while (!text.empty()) {
    const size_t end = text.find_first_of(",;");
    const std::string_view item = trim(text.substr(0, end));
    if (!item.empty()) items.push_back(item);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return items;
}

Status unknown_name(const char* text, std::string_view name) {
  return make_error(HMR_EINVAL,
                    "FI_HMEM='%s': unknown memory interface '%.*s' (known: system, cuda, rocr, "
                    "ze, neuron, synapseai; '^' before the list excludes them instead)",
                    text, static_cast<int>(name.size()), name.data());
}

}  // namespace

int iface_from_name(std::string_view name) {
  for (int iface = 0; iface < HMR_HMEM_IFACE_COUNT; ++iface) {
    const char* known = iface_name(iface);
    if (name.size() == std::char_traits<char>::length(known) &&
        strncasecmp(name.data(), known, name.size()) == 0) {
      return iface;
    }
  }
  return -1;
}

IfaceSelection all_ifaces() {
  IfaceSelection selection;
  selection.enabled.fill(true);
  selection.detection_order.assign(std::begin(kDefaultOrder), std::end(kDefaultOrder));
  return selection;
}

Result<IfaceSelection> parse_iface_list(const char* text) {
  if (text == nullptr || trim(text).empty()) {
    IfaceSelection selection = all_ifaces();
    selection.text = text == nullptr ? "" : text;
    return selection;
  }
  std::string_view rest = trim(text);
  const bool exclude = rest.front() == '^';
  if (exclude) rest.remove_prefix(1);
  const std::vector<std::string_view> names = split(rest);
  if (names.empty()) {
    return make_error(HMR_EINVAL, "FI_HMEM='%s': '^' must be followed by the interfaces to "
                      "exclude", text);
  }

  IfaceSelection selection;
  selection.text = text;
  std::vector<int> listed;
  for (std::string_view name : names) {
    const int iface = iface_from_name(name);
    if (iface < 0) return unknown_name(text, name);
    if (exclude && iface == HMR_HMEM_SYSTEM) {
      return make_error(HMR_EINVAL, "FI_HMEM='%s': the system interface cannot be excluded "
                        "(host memory is always registrable)", text);
    }
    if (std::find(listed.begin(), listed.end(), iface) == listed.end()) listed.push_back(iface);
  }

  if (exclude) {
    selection = all_ifaces();
    selection.text = text;
    for (int iface : listed) selection.enabled[static_cast<size_t>(iface)] = false;
    std::erase_if(selection.detection_order,
                  [&](int iface) { return !selection.enabled[static_cast<size_t>(iface)]; });
    return selection;
  }
  selection.enabled[HMR_HMEM_SYSTEM] = true;
  for (int iface : listed) {
    selection.enabled[static_cast<size_t>(iface)] = true;
    if (iface != HMR_HMEM_SYSTEM) selection.detection_order.push_back(iface);
  }
  return selection;
}

Result<IfaceSelection> read_hmem_selection() {
  return parse_iface_list(std::getenv("FI_HMEM"));
}

}  // namespace hmr::hmem
