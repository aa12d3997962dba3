#include "kestrel/models/parameter_budget.h"

#include "kestrel/core/error.h"

namespace kestrel::models {
namespace {
thread_local ParameterBudget* active_budget = nullptr;
}  // namespace

ParameterBudget::ParameterBudget(int64_t max_values) : max_values_(max_values), previous_(active_budget) {
  active_budget = this;
}

ParameterBudget::~ParameterBudget() { active_budget = previous_; }

bool parameter_budget_active() { return active_budget != nullptr; }

void charge_parameters(const char* what, std::initializer_list<int64_t> dims) {
  ParameterBudget* budget = active_budget;
  if (!budget) return;
  std::string shape;
  int64_t count = 1;
  bool overflow = false;
  for (int64_t d : dims) {
    shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    if (d < 0) fail(what, ": negative size ", d);
    overflow |= __builtin_mul_overflow(count, d, &count);
  }
  overflow |= __builtin_add_overflow(budget->charged_, count, &budget->charged_);
  if (overflow) budget->charged_ = INT64_MAX;  // saturated: charged() > max_values() tells the caller why it failed
  if (budget->charged_ > budget->max_values_)
    fail("the network needs more than ", budget->max_values_, " parameter values (it passes that at a ", what,
         " of shape [", shape, "])");
}

}  // namespace kestrel::models
