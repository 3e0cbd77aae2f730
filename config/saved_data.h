// What a dumped iteration saves of each tensor (the job config's saved_data; also the flight
// recorder's own saved_data).
#pragma once

#include <cstdint>

namespace dumpd::config {

enum class SavedData : uint8_t { kTensor, kStatistic, kFull };

}  // namespace dumpd::config
