#include "omni/schedulers/scheduler.h"

#include <gtest/gtest.h>

#include "omni/error.h"
#include "omni/schedulers/flow_match_euler.h"
#include "omni/schedulers/unipc_multistep.h"
#include "schedulers/fixture_loop.h"

using namespace omni::schedulers;
using namespace omni::schedulers::testing;
using nlohmann::json;

namespace {

json fixture_config(const std::string& folder) {
  return omni::io::read_json_file(wan_data(folder) / "config.json");
}

json unipc_config() {
  return fixture_config("scheduler_unipc_flow_shift3");
}
json flow_match_config() {
  return fixture_config("scheduler_flowmatch_euler_shift3");
}

// The ConfigError message make_scheduler() gives, or "no error".
std::string config_error(const json& config) {
  try {
    make_scheduler(config, "scheduler_config.json");
  } catch (const omni::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

bool mentions(const std::string& message, const std::string& word) {
  return message.find(word) != std::string::npos;
}

}  // namespace

TEST(MakeScheduler, BuildsTheClassNamedInTheConfig) {
  auto unipc = make_scheduler(unipc_config(), "unipc");
  EXPECT_EQ(unipc->class_name(), "UniPCMultistepScheduler");
  EXPECT_NE(dynamic_cast<UniPCMultistepScheduler*>(unipc.get()), nullptr);
  EXPECT_EQ(unipc->shift(), 3.0);
  EXPECT_EQ(unipc->num_train_timesteps(), 1000);

  auto euler = make_scheduler(flow_match_config(), "euler");
  EXPECT_EQ(euler->class_name(), "FlowMatchEulerDiscreteScheduler");
  EXPECT_NE(dynamic_cast<FlowMatchEulerScheduler*>(euler.get()), nullptr);
  EXPECT_EQ(euler->shift(), 3.0);
}

TEST(MakeScheduler, ReadsTheWanFieldsIntoTypedConfig) {
  json config = unipc_config();
  config["solver_type"] = "bh1";
  config["disable_corrector"] = {0, 2};
  config["final_sigmas_type"] = "sigma_min";
  config["solver_order"] = 3;
  const UniPCConfig typed = UniPCConfig::from_json(config, "cfg");
  EXPECT_EQ(typed.solver_type, UniPCSolverType::kBh1);
  EXPECT_EQ(typed.disable_corrector, (std::vector<int>{0, 2}));
  EXPECT_EQ(typed.final_sigmas_type, FinalSigmas::kSigmaMin);
  EXPECT_EQ(typed.solver_order, 3);
  EXPECT_EQ(typed.flow_shift, 3.0);
  EXPECT_FALSE(typed.shift_terminal.has_value());
}

TEST(MakeScheduler, ShiftOverrideRebuildsAsIfTheConfigSaidIt) {
  for (const auto& [from, to] :
       {std::pair{"scheduler_unipc_flow_shift3", "scheduler_unipc_flow_shift12"},
        std::pair{"scheduler_flowmatch_euler_shift3", "scheduler_flowmatch_euler_shift12"}}) {
    auto overridden = make_scheduler(fixture_config(from), from, SchedulerOverrides{12.0});
    auto reference = make_scheduler(fixture_config(to), to);
    EXPECT_EQ(overridden->shift(), 12.0);
    overridden->set_timesteps(8);
    reference->set_timesteps(8);
    EXPECT_TRUE(torch::equal(overridden->timesteps(), reference->timesteps())) << from;
    EXPECT_TRUE(torch::equal(overridden->sigmas(), reference->sigmas())) << from;
  }
}

TEST(MakeScheduler, UnknownFieldIsNamed) {
  json config = unipc_config();
  config["solver_magic"] = 1;
  const auto message = config_error(config);
  EXPECT_TRUE(mentions(message, "'solver_magic'")) << message;
  EXPECT_TRUE(mentions(message, "scheduler_config.json")) << message;

  json euler = flow_match_config();
  euler["shfit"] = 3.0;
  EXPECT_TRUE(mentions(config_error(euler), "'shfit'")) << config_error(euler);
}

TEST(MakeScheduler, UnsupportedValuesAreNamed) {
  const std::vector<std::pair<std::string, json>> unipc_cases = {
      {"use_karras_sigmas", true},
      {"use_exponential_sigmas", true},
      {"use_beta_sigmas", true},
      {"use_flow_sigmas", false},
      {"prediction_type", "epsilon"},
      {"predict_x0", false},
      {"thresholding", true},
      {"solver_type", "bh3"},
      {"use_dynamic_shifting", true},
      {"final_sigmas_type", "sigma_max"},
      {"timestep_spacing", "uniform"},
      {"solver_p", json::object()},
      {"solver_order", 0},
      {"flow_shift", -1.0},
      {"beta_schedule", "cosine"},
      {"time_shift_type", "quadratic"},
  };
  for (const auto& [field, value] : unipc_cases) {
    json config = unipc_config();
    config[field] = value;
    const auto message = config_error(config);
    EXPECT_TRUE(mentions(message, "'" + field + "'")) << field << ": " << message;
  }
  const std::vector<std::pair<std::string, json>> euler_cases = {
      {"use_karras_sigmas", true},
      {"use_exponential_sigmas", true},
      {"use_beta_sigmas", true},
      {"use_dynamic_shifting", true},
      {"stochastic_sampling", true},
      {"time_shift_type", "quadratic"},
      {"shift", 0.0},
      {"num_train_timesteps", 0},
      {"shift_terminal", 1.0},
  };
  for (const auto& [field, value] : euler_cases) {
    json config = flow_match_config();
    config[field] = value;
    const auto message = config_error(config);
    EXPECT_TRUE(mentions(message, "'" + field + "'")) << field << ": " << message;
  }
}

TEST(MakeScheduler, WrongTypeIsNamed) {
  json config = unipc_config();
  config["flow_shift"] = "twelve";
  const auto message = config_error(config);
  EXPECT_TRUE(mentions(message, "'flow_shift'")) << message;
  EXPECT_TRUE(mentions(message, "wrong type")) << message;

  json corrector = unipc_config();
  corrector["disable_corrector"] = {"first"};
  EXPECT_TRUE(mentions(config_error(corrector), "'disable_corrector'")) << config_error(corrector);
}

TEST(MakeScheduler, UnknownClassListsTheKnownOnes) {
  json config = unipc_config();
  config["_class_name"] = "DDIMScheduler";
  const auto message = config_error(config);
  EXPECT_TRUE(mentions(message, "'DDIMScheduler'")) << message;
  for (const auto& known : known_scheduler_classes())
    EXPECT_TRUE(mentions(message, known)) << message;
  EXPECT_EQ(known_scheduler_classes(), (std::vector<std::string>{"FlowMatchEulerDiscreteScheduler",
                                                                 "UniPCMultistepScheduler"}));

  config.erase("_class_name");
  EXPECT_TRUE(mentions(config_error(config), "'_class_name'")) << config_error(config);
  EXPECT_TRUE(mentions(config_error(json::array()), "JSON object")) << config_error(json::array());
}

// Fields that are metadata or absent take diffusers' defaults: a minimal
// UniPC config must still say it is the flow variant.
TEST(MakeScheduler, AbsentFieldsTakeTheDiffusersDefaults) {
  const json minimal_euler = {{"_class_name", "FlowMatchEulerDiscreteScheduler"}};
  auto euler = make_scheduler(minimal_euler, "minimal");
  EXPECT_EQ(euler->shift(), 1.0);
  EXPECT_EQ(euler->num_train_timesteps(), 1000);

  // diffusers' UniPC defaults are the epsilon-prediction, non-flow variant.
  const json minimal_unipc = {{"_class_name", "UniPCMultistepScheduler"}};
  EXPECT_TRUE(mentions(config_error(minimal_unipc), "'prediction_type'"))
      << config_error(minimal_unipc);
  const json flow_unipc = {{"_class_name", "UniPCMultistepScheduler"},
                           {"prediction_type", "flow_prediction"},
                           {"use_flow_sigmas", true},
                           {"flow_shift", 3.0}};
  auto unipc = make_scheduler(flow_unipc, "flow");
  auto full = make_scheduler(unipc_config(), "full");
  unipc->set_timesteps(8);
  full->set_timesteps(8);
  EXPECT_TRUE(torch::equal(unipc->timesteps(), full->timesteps()));
  EXPECT_TRUE(torch::equal(unipc->sigmas(), full->sigmas()));
}
