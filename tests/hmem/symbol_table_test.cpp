#include "hmem/symbol_table.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda/cuda_symbols.h"
#include "tests/hmem/fake_cuda_library.h"

namespace hmr::hmem {
namespace {

using hmr::testing::fake_cuda_path;

// A vendor name no real runtime uses, so the tests own its override variable.
constexpr const char* kVendor = "HMRTEST";
constexpr const char* kVariable = "HMR_HMRTEST_LIBRARY";

class SymbolTableTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kVariable); }
};

TEST_F(SymbolTableTest, OverrideVariableIsHmrVendorLibrary) {
  EXPECT_EQ(library_override_variable("cuda"), "HMR_CUDA_LIBRARY");
  EXPECT_EQ(library_override_variable("SynapseAI"), "HMR_SYNAPSEAI_LIBRARY");
}

TEST_F(SymbolTableTest, PathIsTheSonameUnlessOverridden) {
  EXPECT_EQ(resolve_library_path(kVendor, "libhmrtest.so.1"), "libhmrtest.so.1");
  setenv(kVariable, "", 1);  // empty means unset, not "load nothing"
  EXPECT_EQ(resolve_library_path(kVendor, "libhmrtest.so.1"), "libhmrtest.so.1");
  setenv(kVariable, "/opt/x/libhmrtest.so.1", 1);
  EXPECT_EQ(resolve_library_path(kVendor, "libhmrtest.so.1"), "/opt/x/libhmrtest.so.1");
}

TEST_F(SymbolTableTest, MissingLibraryReasonNamesThePathAndTheOverride) {
  const SymbolSpec specs[] = {{"cuInit", SymbolNeed::required}};
  Result<SymbolTable> table = SymbolTable::load(kVendor, "/nonexistent/libhmrtest.so.1", specs);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), HMR_ENOSYS);
  EXPECT_NE(table.status().reason().find("/nonexistent/libhmrtest.so.1"), std::string::npos)
      << table.status().reason();
  EXPECT_NE(table.status().reason().find(kVariable), std::string::npos);
}

TEST_F(SymbolTableTest, MissingRequiredSymbolIsNamed) {
  setenv(kVariable, fake_cuda_path(), 1);
  const SymbolSpec specs[] = {{"cuInit", SymbolNeed::required},
                              {"hmr_no_such_symbol", SymbolNeed::required}};
  Result<SymbolTable> table = SymbolTable::load(kVendor, "libhmrtest.so.1", specs);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), HMR_ENOSYS);
  EXPECT_NE(table.status().reason().find("hmr_no_such_symbol"), std::string::npos)
      << table.status().reason();
  EXPECT_NE(table.status().reason().find(fake_cuda_path()), std::string::npos);
}

TEST_F(SymbolTableTest, MissingOptionalSymbolIsNull) {
  setenv(kVariable, fake_cuda_path(), 1);
  const SymbolSpec specs[] = {{"cuInit", SymbolNeed::required},
                              {"hmr_no_such_symbol", SymbolNeed::optional}};
  Result<SymbolTable> table = SymbolTable::load(kVendor, "libhmrtest.so.1", specs);
  ASSERT_TRUE(table.ok()) << table.status().reason();
  ASSERT_EQ(table->size(), 2u);
  EXPECT_NE(table->address(0), nullptr);
  EXPECT_EQ(table->address(1), nullptr);
  EXPECT_EQ(table->path(), fake_cuda_path());
}

TEST_F(SymbolTableTest, CudaOverrideLoadsEveryCudaSymbolFromTheFake) {
  setenv("HMR_CUDA_LIBRARY", fake_cuda_path(), 1);
  Result<SymbolTable> table = SymbolTable::load("CUDA", "libcuda.so.1", cuda::cuda_symbol_specs());
  unsetenv("HMR_CUDA_LIBRARY");
  ASSERT_TRUE(table.ok()) << table.status().reason();
  EXPECT_EQ(table->path(), fake_cuda_path());
  for (size_t i = 0; i < table->size(); ++i) {
    EXPECT_NE(table->address(i), nullptr) << cuda::cuda_symbol_specs()[i].name;
  }
}

TEST_F(SymbolTableTest, MovedTableKeepsItsAddresses) {
  setenv(kVariable, fake_cuda_path(), 1);
  const SymbolSpec specs[] = {{"cuInit", SymbolNeed::required}};
  Result<SymbolTable> loaded = SymbolTable::load(kVendor, "libhmrtest.so.1", specs);
  ASSERT_TRUE(loaded.ok());
  void* address = loaded->address(0);
  SymbolTable moved(std::move(*loaded));
  EXPECT_EQ(moved.address(0), address);
  EXPECT_EQ(moved.path(), fake_cuda_path());
}

}  // namespace
}  // namespace hmr::hmem
