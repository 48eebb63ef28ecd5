// libfabric return codes as hmr error codes.
#pragma once

namespace hmr::nic::ofi {

// The HMR_E* code (positive) for a libfabric return value (-FI_E*, or positive).  hmr uses
// libfabric's numbers, so known codes pass through; any other becomes HMR_EIO.
int hmr_code_for_fi(int fi_return);

}  // namespace hmr::nic::ofi
