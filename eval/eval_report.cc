#include "eval/eval_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/contract.h"

namespace hsring::eval {

EvalReport summarise_decoding(std::span<const EvalPrompt> prompts,
                              std::span<SpeculativeResult> speculative,
                              std::span<const std::vector<int32_t>> greedy, uint32_t block_size,
                              const SamplingOptions& sampling) {
  const bool checked = sampling.greedy();
  HSRING_REQUIRE(speculative.size() == prompts.size() &&
                 greedy.size() == (checked ? prompts.size() : 0));
  EvalReport report;
  report.sampling = sampling;
  report.matches_greedy = checked;
  report.block_size = block_size;
  std::vector<uint64_t> verified(block_size, 0), accepted(block_size, 0);
  std::vector<PromptTally> tallies;
  uint64_t produced_sum = 0, steps = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SpeculativeResult& r = speculative[i];
    HSRING_REQUIRE(r.verified.size() == block_size && r.accepted.size() == block_size);
    PromptResult p;
    p.index = uint32_t(i);
    p.source = prompts[i].source;
    p.prompt = prompts[i].tokens;
    p.output = std::move(r.tokens);
    if (checked) {
      p.greedy = greedy[i];
      p.matches_greedy = p.output == p.greedy;
    }
    p.produced = std::move(r.produced);
    uint64_t sum = 0;
    for (const uint32_t n : p.produced) sum += n;
    p.acceptance_length = p.produced.empty() ? 0 : double(sum) / double(p.produced.size());
    tallies.push_back({sum, p.produced.size()});
    produced_sum += sum;
    steps += p.produced.size();
    for (size_t j = 0; j < block_size; ++j) {
      verified[j] += r.verified[j];
      accepted[j] += r.accepted[j];
    }
    report.matches_greedy = report.matches_greedy && p.matches_greedy;
    report.target_forwards += 1 + p.produced.size();  // the prefill, then one per step
    report.generated_tokens += p.output.size();
    report.prompts.push_back(std::move(p));
  }
  report.acceptance_length = steps ? double(produced_sum) / double(steps) : 0;
  report.acceptance_length_interval = bootstrap_acceptance_interval(tallies);
  for (size_t j = 1; j < block_size; ++j)
    report.position_acceptance.push_back(verified[j] ? double(accepted[j]) / double(verified[j])
                                                     : 0);
  report.ideal_speedup = report.acceptance_length;
  return report;
}

std::string eval_report_json(const EvalReport& report) {
  nlohmann::json j;
  const bool greedy = report.sampling.greedy();
  j["decoding"] = greedy ? "greedy" : "sampling";
  if (!greedy) {
    j["temperature"] = report.sampling.temperature;
    j["top_p"] = report.sampling.top_p;
    j["seed"] = report.sampling.seed;
  }
  j["acceptance_length"] = report.acceptance_length;
  j["acceptance_length_interval"] = {report.acceptance_length_interval.low,
                                     report.acceptance_length_interval.high};
  j["acceptance_length_interval_level"] = report.acceptance_length_interval.level;
  j["position_acceptance"] = report.position_acceptance;
  j["ideal_speedup"] = report.ideal_speedup;
  if (greedy) j["matches_greedy"] = report.matches_greedy;
  j["block_size"] = report.block_size;
  j["target_forwards"] = report.target_forwards;
  j["generated_tokens"] = report.generated_tokens;
  if (report.speculative_seconds > 0 && report.greedy_seconds > 0) {
    const double tokens = double(report.generated_tokens);
    j["speculative_tokens_per_s"] = tokens / report.speculative_seconds;
    j["greedy_tokens_per_s"] = tokens / report.greedy_seconds;
    j["measured_speedup"] = report.greedy_seconds / report.speculative_seconds;
  }
  j["prompts"] = nlohmann::json::array();
  for (const PromptResult& p : report.prompts) {
    nlohmann::json prompt = {{"index", p.index},       {"source", p.source},
                             {"prompt", p.prompt},     {"output", p.output},
                             {"produced", p.produced}, {"acceptance_length", p.acceptance_length}};
    if (greedy) {
      prompt["greedy"] = p.greedy;
      prompt["matches_greedy"] = p.matches_greedy;
    }
    j["prompts"].push_back(std::move(prompt));
  }
  return j.dump(2) + "\n";
}

std::string format_acceptance_length(double tau, const AcceptanceInterval& interval) {
  char text[96];
  std::snprintf(text, sizeof text, "%.3f (%.0f%% interval %.3f-%.3f)", tau, interval.level * 100,
                interval.low, interval.high);
  return text;
}

std::string eval_report_text(const EvalReport& report) {
  std::ostringstream s;
  char line[192];
  s << "acceptance length (tau) "
    << format_acceptance_length(report.acceptance_length, report.acceptance_length_interval)
    << " tokens per target forward, over " << report.prompts.size() << " prompts\n";
  s << "position acceptance (1.." << (report.block_size - 1) << "):";
  for (const double a : report.position_acceptance) {
    std::snprintf(line, sizeof line, " %.2f", a);
    s << line;
  }
  std::snprintf(line, sizeof line,
                "\nideal speed-up %.2fx (drafting free, verification as one decode step)\n",
                report.ideal_speedup);
  s << line;
  if (report.speculative_seconds > 0 && report.greedy_seconds > 0) {
    const double tokens = double(report.generated_tokens);
    std::snprintf(
        line, sizeof line, "on the GPU: speculative %.1f tokens/s, plain %s %.1f tokens/s: %.2fx\n",
        tokens / report.speculative_seconds, report.sampling.greedy() ? "greedy" : "sampling",
        tokens / report.greedy_seconds, report.greedy_seconds / report.speculative_seconds);
    s << line;
  }
  if (!report.sampling.greedy()) {
    std::snprintf(line, sizeof line,
                  "sampled: temperature %g, top-p %g, seed %llu (%llu tokens, %llu target "
                  "forwards; no greedy check)\n",
                  report.sampling.temperature, report.sampling.top_p,
                  static_cast<unsigned long long>(report.sampling.seed),
                  static_cast<unsigned long long>(report.generated_tokens),
                  static_cast<unsigned long long>(report.target_forwards));
    s << line;
    return s.str();
  }
  size_t matched = 0;
  for (const PromptResult& p : report.prompts) matched += p.matches_greedy;
  s << "matches greedy: " << (report.matches_greedy ? "yes" : "NO") << " (" << matched << " of "
    << report.prompts.size() << " prompts; " << report.generated_tokens << " tokens, "
    << report.target_forwards << " target forwards)\n";
  return s.str();
}

}  // namespace hsring::eval
