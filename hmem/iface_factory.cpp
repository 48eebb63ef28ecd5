#include "hmem/iface_factory.h"

#include "cuda/cuda_iface.h"
#include "neuron/neuron_iface.h"
#include "rocr/rocr_iface.h"
#include "synapseai/synapseai_iface.h"
#include "ze/ze_iface.h"

namespace hmr::hmem {
namespace {

template <typename T>
std::unique_ptr<Iface> make() {
  return std::make_unique<T>();
}

// The vendor names match each iface's own SymbolTable::load, so HMR_<VENDOR>_LIBRARY means the
// same library here (the "was it already loaded" check) as there.
const IfaceDescriptor kBuiltin[] = {
    {HMR_HMEM_CUDA, "CUDA", cuda::kCudaDefaultLibrary, true, &make<cuda::CudaIface>},
    {HMR_HMEM_ROCR, "ROCR", rocr::kRocrDefaultLibrary, true, &make<rocr::RocrIface>},
    {HMR_HMEM_ZE, "ZE", ze::kZeDefaultLibrary, true, &make<ze::ZeIface>},
    // Neither Neuron nor SynapseAI can be asked about a pointer: they know what hmr allocated.
    {HMR_HMEM_NEURON, "NEURON", neuron::kNeuronDefaultLibrary, false, &make<neuron::NeuronIface>},
    {HMR_HMEM_SYNAPSEAI, "SYNAPSEAI", synapseai::kSynapseDefaultLibrary, false,
     &make<synapseai::SynapseaiIface>},
};

}  // namespace

std::span<const IfaceDescriptor> builtin_ifaces() { return kBuiltin; }

}  // namespace hmr::hmem
