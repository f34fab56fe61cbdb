// Precompiled header: LibTorch is the slow part of every translation unit.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
