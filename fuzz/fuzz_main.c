/* libFuzzer entry point of one target: KL_FUZZ_FN names it (fuzz/CMakeLists.txt). */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return KL_FUZZ_FN(data, size);
}
