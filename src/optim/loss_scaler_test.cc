#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"

namespace tessera::optim {
namespace {

// Megatron's DynamicGradScaler, step by step: back off by half once `hysteresis` overflows have been
// seen since the last growth (then on every overflow), grow after `window` clean steps, never go below
// the minimum.
TEST(LossScaler, DynamicScaleFollowsMegatronsRules) {
  LossScaler s({true, 64.0f, 8.0f, 3, 2});
  std::vector<std::pair<bool, float>> steps = {
      {true, 64},   // first overflow: tolerated (hysteresis 2)
      {true, 32},   // second: halve
      {true, 16},   // the tolerance is spent until the scale grows again: halve
      {false, 16}, {false, 16},
      {false, 32},  // third clean step in a row: double, and the tolerance is back
      {true, 32},   {false, 32}, {true, 16},  // a clean step in between does not restore the tolerance
      {true, 8},    {true, 8},                 // the minimum holds
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    s.update(steps[i].first);
    EXPECT_EQ(s.scale(), steps[i].second) << "after step " << i + 1;
  }
}

TEST(LossScaler, ConstantScaleNeverChanges) {
  LossScaler s({false, 128.0f, 128.0f, 1, 1});
  for (bool found_inf : {true, false, false, true}) {
    s.update(found_inf);
    EXPECT_EQ(s.scale(), 128.0f);
  }
}

TEST(LossScaler, StateRoundTripsAndMalformedStateIsNamed) {
  LossScaler a({true, 1024.0f, 1.0f, 2, 2});
  for (bool found_inf : {true, true, false}) a.update(found_inf);
  LossScaler b({true, 1024.0f, 1.0f, 2, 2});
  b.load_state(a.state());
  for (bool found_inf : {false, true, false, false, true}) {
    a.update(found_inf);
    b.update(found_inf);
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_EQ(a.state(), b.state());
  try {
    b.load_state({{"scale", -1.0}, {"growth_tracker", 0}, {"hysteresis_tracker", 1}});
    FAIL() << "a negative scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss scaler state"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.load_state(nlohmann::json::array()), Error);
}

// The optimizer undoes the loss scale: gradients scaled by a power of two give bit for bit the step
// (and norm) of the unscaled gradients, with and without clipping.
TEST(LossScaler, OptimizerStepOfScaledGradientsEqualsTheUnscaledStep) {
  for (float clip : {0.0f, 1e-3f}) {
    model::ParameterSet plain, scaled;
    for (model::ParameterSet* p : {&plain, &scaled}) {
      p->add({"w", {7, 5}, model::Init::Normal, 0.02f, true});
      p->add({"b", {5}, model::Init::Zeros, 0.0f, false});
      p->allocate(3);
    }
    const float loss_scale = 65536.0f;
    for (int64_t i = 0; i < plain.numel(); ++i) {
      plain.grads().f32()[i] = std::sin(static_cast<float>(i)) * 1e-3f;
      scaled.grads().f32()[i] = plain.grads().f32()[i] * loss_scale;
    }
    AdamWConfig config;
    config.clip_grad = clip;
    AdamWOptimizer a(plain, config), b(scaled, config);
    StepResult ra = a.step(1e-2f), rb = b.step(1e-2f, loss_scale);
    EXPECT_EQ(ra.grad_norm, rb.grad_norm);
    for (int64_t i = 0; i < plain.numel(); ++i) ASSERT_EQ(plain.values().f32()[i], scaled.values().f32()[i]) << i;
    // An overflowed gradient skips the step and leaves the weights.
    scaled.grads().f32()[0] = INFINITY;
    Tensor before = scaled.values().clone();
    EXPECT_TRUE(b.step(1e-2f, loss_scale).skipped);
    for (int64_t i = 0; i < plain.numel(); ++i) ASSERT_EQ(scaled.values().f32()[i], before.f32()[i]);
  }
}

}  // namespace
}  // namespace tessera::optim
