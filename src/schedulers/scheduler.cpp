#include "omni/schedulers/scheduler.h"

#include <functional>
#include <map>

#include "omni/error.h"
#include "omni/schedulers/flow_match_euler.h"
#include "omni/schedulers/unipc_multistep.h"

namespace omni::schedulers {

namespace {

using Factory =
    std::function<std::unique_ptr<Scheduler>(const nlohmann::json&, const std::string&)>;

// The config field that holds each class's shift.
struct SchedulerClass {
  const char* shift_field;
  Factory make;
};

const std::map<std::string, SchedulerClass>& scheduler_classes() {
  static const std::map<std::string, SchedulerClass> classes = {
      {"FlowMatchEulerDiscreteScheduler",
       {"shift",
        [](const nlohmann::json& config, const std::string& source) -> std::unique_ptr<Scheduler> {
          return std::make_unique<FlowMatchEulerScheduler>(
              FlowMatchEulerConfig::from_json(config, source), source);
        }}},
      {"UniPCMultistepScheduler",
       {"flow_shift",
        [](const nlohmann::json& config, const std::string& source) -> std::unique_ptr<Scheduler> {
          return std::make_unique<UniPCMultistepScheduler>(UniPCConfig::from_json(config, source),
                                                           source);
        }}},
  };
  return classes;
}

std::string known_list() {
  std::string list;
  for (const auto& name : known_scheduler_classes()) list += (list.empty() ? "" : ", ") + name;
  return list;
}

}  // namespace

std::vector<std::string> known_scheduler_classes() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : scheduler_classes()) names.push_back(name);
  return names;
}

std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const std::string& source,
                                          const SchedulerOverrides& overrides) {
  OMNI_CHECK(config.is_object(), ConfigError, source, ": expected a JSON object, got ",
             config.type_name());
  OMNI_CHECK(config.contains("_class_name") && config.at("_class_name").is_string(), ConfigError,
             source,
             ": missing string field '_class_name' (known scheduler classes: ", known_list(), ")");
  const auto class_name = config.at("_class_name").get<std::string>();
  const auto found = scheduler_classes().find(class_name);
  OMNI_CHECK(found != scheduler_classes().end(), ConfigError, source, ": field '_class_name' = '",
             class_name, "' is not a known scheduler class (known: ", known_list(), ")");
  if (!overrides.shift) return found->second.make(config, source);
  nlohmann::json patched = config;
  patched[found->second.shift_field] = *overrides.shift;
  return found->second.make(patched, source + " (with " + found->second.shift_field + " = " +
                                         std::to_string(*overrides.shift) + ")");
}

}  // namespace omni::schedulers
