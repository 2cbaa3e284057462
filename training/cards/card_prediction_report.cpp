// The card prediction as the studies show it (card_prediction.h): the log line, the JSON, the
// sweep's columns and the Markdown table.
#include <fmt/format.h>

#include <algorithm>

#include "training/cards/alloc_conf.h"
#include "training/cards/card_prediction.h"
#include "training/platform/memory.h"
#include "training/platform/statistics.h"

namespace training {

namespace {

// "; estimated 2,470 img/s (101.2 ms a step; memory-bound: ...)", or why there is no speed (where
// that is not why the card cannot run the setting, said already).
std::string speed_text(const CardPrediction& p) {
  if (!p.speed) return p.no_speed == p.unsupported ? "" : "; " + p.no_speed;
  return fmt::format("; estimated {} img/s ({:.1f} ms a step; {})",
                     rate_text(p.speed->images_per_second()), 1e3 * p.speed->seconds,
                     p.speed->why());
}

// The speed fields of a prediction: estimated, with the model's name; null with the reason where
// the card has no speed.
nlohmann::ordered_json speed_json(const CardPrediction& p) {
  if (!p.speed) {
    return {{"predicted_step_seconds", nullptr},
            {"predicted_images_per_second", nullptr},
            {"speed_model", nullptr},
            {"predicted_gpu_seconds", nullptr},
            {"predicted_host_seconds", nullptr},
            {"speed_bound", nullptr},
            {"operations", nullptr},
            {"speed_not_estimated", p.no_speed}};
  }
  const StepEstimate& e = *p.speed;
  nlohmann::ordered_json kinds = nlohmann::ordered_json::array();
  for (int i = 0; i < kOpKinds; ++i) {
    const KindTime& k = e.kinds[static_cast<size_t>(i)];
    if (k.kernels == 0 && k.seconds <= 0) continue;
    kinds.push_back({{"operation", op_kind_name(static_cast<OpKind>(i))},
                     {"seconds", k.seconds},
                     {"share_of_gpu_time", e.gpu_seconds > 0 ? k.seconds / e.gpu_seconds : 0},
                     {"kernels", k.kernels},
                     {"bound", k.compute_bound() ? "compute" : "memory"}});
  }
  return {{"predicted_step_seconds", e.seconds},
          {"predicted_images_per_second", e.images_per_second()},
          {"speed_model", std::string(kSpeedModelName) + ", estimated"},
          {"predicted_gpu_seconds", e.gpu_seconds},
          {"predicted_host_seconds", e.host_seconds},
          {"speed_bound", e.why()},
          {"operations", kinds},
          {"speed_not_estimated", nullptr}};
}

// data.device_resident's bytes on the card; null without it.
nlohmann::ordered_json resident_json(const CardPrediction& p) {
  if (p.held.resident.empty()) return nullptr;
  return p.held.resident_bytes();
}

// The allocator's limit a prediction replayed under, and where it comes from.
std::string allocator_limit_text(const CardPrediction& p) {
  const std::string card_less =
      fmt::format("the card less {} outside the allocator: {}",
                  format_bytes(p.beside.outside_allocator), p.beside.outside_source);
  if (!p.limited_by_memory_limit) {
    return fmt::format("{} ({})", format_bytes(p.allocator.limit), card_less);
  }
  const auto [limit, card] =
      format_bytes_apart(p.allocator.limit, p.card.memory_bytes - p.beside.outside_allocator);
  return fmt::format("{}, memory.limit, which is below {} ({})", limit, card, card_less);
}

// The estimated step on the card per setting: its time, why, and a table of its operations by
// kind (share of the GPU's time, compute- or memory-bound).
std::string speed_markdown(const std::vector<std::pair<std::string, CardPrediction>>& rows) {
  const auto& first = rows.front().second;
  const bool any = std::any_of(rows.begin(), rows.end(),
                               [](const auto& row) { return row.second.speed.has_value(); });
  if (!any) return "\nSpeed: " + first.no_speed + ".\n";
  std::string md = fmt::format(
      "\n### The step on {}, estimated\n\n{}: each operation the larger of its FLOPs at the "
      "card's peak and its bytes at its bandwidth, each times an efficiency fitted on published "
      "figures (`train cards` prints the fit), plus the host's kernel launches where they take "
      "longer. Not measured.\n\n| setting | step ms | img/s | why |\n|---|---:|---:|---|\n",
      first.card.name, kSpeedModelName);
  for (const auto& [setting, p] : rows) {
    md += p.speed ? fmt::format("| {} | {:.2f} | {} | {} |\n", setting, 1e3 * p.speed->seconds,
                                rate_text(p.speed->images_per_second()), p.speed->why())
                  : fmt::format("| {} | - | - | {} |\n", setting, p.no_speed);
  }
  md += "\n| operation (share of the GPU's time) |";
  std::string rule = "|---|";
  for (const auto& row : rows) md += " " + row.first + " |", rule += "---:|";
  md += "\n" + rule + "\n";
  for (int i = 0; i < kOpKinds; ++i) {
    std::string line = fmt::format("| {} |", op_kind_name(static_cast<OpKind>(i)));
    bool any = false;
    for (const auto& row : rows) {
      const auto& speed = row.second.speed;
      const KindTime* k = speed ? &speed->kinds[static_cast<size_t>(i)] : nullptr;
      if (!k || k->seconds <= 0) {
        line += " - |";
        continue;
      }
      any = true;
      line += fmt::format(" {:.1f}% {} |", 100 * k->seconds / speed->gpu_seconds,
                          k->compute_bound() ? "compute" : "memory");
    }
    if (any) md += line + "\n";
  }
  return md;
}

}  // namespace

std::string CardPrediction::largest_batch_text() const {
  if (!unsupported.empty()) return "-";  // none: the card cannot run it
  return std::to_string(largest_batch) +
         beyond_training_set(largest_batch, accumulate_steps, train_images, " of the config");
}

std::string CardPrediction::fits_text() const {
  if (!unsupported.empty()) return "cannot run: " + unsupported;
  if (replay.fits) return "yes";
  // Fitting is not monotone in the batch: a batch below the largest that fits may not.
  const std::string below =
      batch_size < largest_batch
          ? fmt::format(
                "; below the largest batch that fits, {}: fitting is not monotone in the batch",
                largest_batch)
          : "";
  return "no (out of memory in " + replay.failed_at + below + ")";
}

std::string prediction_line(const std::string& setting, const CardPrediction& p) {
  const auto& r = p.replay;
  if (!p.unsupported.empty()) {  // what it needs, whether or not it would fit
    const auto [card, on_device] = format_bytes_apart(p.card.memory_bytes, p.device_bytes());
    return fmt::format(
               "{} on {} ({}): cannot run: {} (its memory all the same: batch {} predicted {} "
               "allocated, {} reserved, {} on the device)",
               setting, p.card.name, card, p.unsupported, p.batch_size,
               format_bytes(p.figures().peak_allocated), format_bytes(p.figures().peak_reserved),
               on_device) +
           speed_text(p);
  }
  if (!r.fits) {
    // Under memory.limit, the limit it needs where the card holds it (a larger card under the
    // same limit fits no more); else the card it needs.
    const bool limit_needed = p.limited_by_memory_limit &&
                              p.needed_limit <= p.card.memory_bytes - p.beside.outside_allocator;
    const std::string limit = size_at_least_text(p.needed_limit),
                      card = size_at_least_text(p.needed_limit + p.beside.outside_allocator);
    const std::string needs =
        limit_needed ? "a memory.limit of at least " + limit + " (--memory-limit " + limit + "; "
        : p.limited_by_memory_limit  // both short: a larger card alone fits no more
            ? "a memory.limit of at least " + limit + " on a card of at least " + card +
                  " (--memory-limit " + limit + " --card " + card + "; "
            : card + " on the device, on the smallest card it fits (";
    return fmt::format(
               "{} on {} ({}): batch {} does not fit: out of memory in {}; it needs {}{} reserved, "
               "{} allocated{}), {}; the largest batch that fits is {}{}",
               setting, p.card.name, format_bytes(p.card.memory_bytes), p.batch_size, r.failed_at,
               needs, format_bytes(p.needed.peak_reserved), format_bytes(p.needed.peak_allocated),
               !p.limited_by_memory_limit && p.needed_by_size > 0 &&
                       p.needed_by_size <= kLargestCard
                   ? "; a card given by its size, with cuBLAS workspaces of " +
                         format_bytes(beside_tensors(Card{}).cublas_workspace) + ": --card " +
                         size_at_least_text(p.needed_by_size)
                   : "",
               p.margin() < 0 && !p.limited_by_memory_limit
                   ? "up to " + format_bytes(p.needed_limit - p.allocator.limit) +
                         " more than the card has"
                   : "more than the allocator's limit of " + format_bytes(p.allocator.limit) +
                         (p.limited_by_memory_limit ? " (memory.limit)" : ""),
               p.largest_batch_text(),
               p.batch_size < p.largest_batch
                   ? " (above this batch: fitting is not monotone in the batch)"
                   : "") +
           speed_text(p);
  }
  // The card against what the step takes on it: never written alike where they differ.
  const auto [card, on_device] = format_bytes_apart(p.card.memory_bytes, p.device_bytes());
  return fmt::format(
             "{} on {} ({}): batch {} predicted {} allocated ({}), {} reserved, {} on the device "
             "with {} "
             "outside the allocator; fits with {} to spare{}; the largest batch that fits is {}",
             setting, p.card.name, card, p.batch_size, format_bytes(r.peak_allocated), r.peak_phase,
             format_bytes(r.peak_reserved), on_device, format_bytes(p.beside.outside_allocator),
             format_bytes_apart(p.margin(),
                                p.limited_by_memory_limit ? p.allocator.limit : p.card.memory_bytes)
                 .first,
             p.limited_by_memory_limit
                 ? " (allocator capped at memory.limit " + format_bytes(p.allocator.limit) + ")"
                 : "",
             p.largest_batch_text()) +
         speed_text(p);
}

nlohmann::ordered_json prediction_json(const CardPrediction& p) {
  nlohmann::ordered_json phases = nlohmann::ordered_json::array();
  for (const auto& phase : p.figures().phases) {
    phases.push_back({{"phase", phase.phase},
                      {"allocated_peak_bytes", phase.allocated},
                      {"reserved_peak_bytes", phase.reserved}});
  }
  const DataSheet& sheet = p.card.sheet;
  const auto known = [](auto value) {  // 0: the vendor gives none
    return value > 0 ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
  };
  const nlohmann::ordered_json data_sheet =
      sheet.known() ? nlohmann::ordered_json{{"bandwidth_gbps", known(sheet.bandwidth_gbps)},
                                             {"sms", known(sheet.sms)},
                                             {"boost_mhz", known(sheet.boost_mhz)},
                                             {"fp32_tflops", known(sheet.fp32_tflops)},
                                             {"tf32_tflops", known(sheet.tf32_tflops)},
                                             {"fp16_bf16_tflops", known(sheet.half_tflops)},
                                             {"source", sheet.source}}
                    : nlohmann::ordered_json(nullptr);  // a card given by its size
  nlohmann::ordered_json json = {
      {"card",
       {{"name", p.card.name},
        {"memory_bytes", p.card.memory_bytes},
        {"memory_source", p.card.memory_source},
        {"architecture", p.card.architecture.empty()
                             ? nlohmann::ordered_json(nullptr)
                             : nlohmann::ordered_json(p.card.architecture)},  // as train cards
        {"data_sheet", data_sheet}}},
      {"batch_size", p.batch_size},
      {"fits", p.fits()},
      {"unsupported", p.unsupported.empty() ? nlohmann::ordered_json(nullptr)
                                            : nlohmann::ordered_json(p.unsupported)},
      {"failed_in", p.replay.fits ? nlohmann::ordered_json(nullptr)
                                  : nlohmann::ordered_json(p.replay.failed_at)},
      {"predicted_allocated_peak_bytes", p.figures().peak_allocated},
      {"predicted_peak_phase", p.figures().peak_phase},
      {"predicted_reserved_peak_bytes", p.figures().peak_reserved},
      {"needed_allocator_limit_bytes", p.needed_limit},
      {"needed_card_by_size_bytes",
       p.needed_by_size > 0 ? nlohmann::ordered_json(p.needed_by_size) : nullptr},
      {"predicted_device_bytes", p.device_bytes()},
      {"margin_bytes", p.margin()},
      {"largest_batch", p.unsupported.empty() ? nlohmann::ordered_json(p.largest_batch) : nullptr},
      {"cublas_workspace_bytes", p.beside.cublas_workspace * p.beside.workspaces},
      {"outside_allocator_bytes", p.beside.outside_allocator},
      {"outside_allocator_source", p.beside.outside_source},
      {"allocator_options", alloc_conf_text(p.allocator)},
      {"allocator_limit_bytes", p.allocator.limit},
      {"allocator_limit_source", p.limited_by_memory_limit ? "memory.limit" : "card"},
      {"prefetched_batches", p.held.prefetched_batches},
      {"device_resident_bytes", resident_json(p)},
      {"reducer_bucket_bytes", p.reducer_bucket_bytes},
      {"allocator_retries", p.replay.retries},
      {"scaling_checked_at_batch", p.checked_batch},
      {"scaling_mismatched_allocations", p.mismatched},
      {"phases", phases}};
  json.update(speed_json(p));
  return json;
}

nlohmann::ordered_json prediction_columns(const CardPrediction& p) {
  return {{"card", p.card.name},
          {"card_memory_bytes", p.card.memory_bytes},
          {"predicted_allocated_peak_bytes", p.figures().peak_allocated},
          {"predicted_reserved_peak_bytes", p.figures().peak_reserved},
          {"predicted_device_bytes", p.device_bytes()},
          {"fits_on_card", p.fits()},
          {"unsupported_on_card", p.unsupported.empty() ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(p.unsupported)},
          {"largest_batch_on_card",
           p.unsupported.empty() ? nlohmann::ordered_json(p.largest_batch) : nullptr},
          {"allocator_options", alloc_conf_text(p.allocator)},
          {"allocator_limit_bytes", p.allocator.limit},
          {"allocator_limit_source", p.limited_by_memory_limit ? "memory.limit" : "card"},
          {"reducer_bucket_bytes", p.reducer_bucket_bytes},
          {"device_resident_bytes", resident_json(p)},
          {"predicted_images_per_second",
           p.speed ? nlohmann::ordered_json(p.speed->images_per_second()) : nullptr},
          {"speed_not_estimated",
           p.speed ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.no_speed)}};
}

std::string prediction_markdown(const std::vector<std::pair<std::string, CardPrediction>>& rows) {
  if (rows.empty()) return "";
  const auto& first = rows.front().second;
  std::string md = fmt::format(
      "## On {} ({}, {})\n\nPredicted from this machine's allocation stream, replayed through a "
      "model of the CUDA caching allocator{} under {}.\n\n| setting | batch | allocated peak MiB | "
      "reserved peak MiB | on the device MiB | fits | margin MiB | largest batch that fits | "
      "estimated img/s |\n|---|---:|---:|---:|---:|---|---:|---:|---:|\n",
      first.card.name, format_bytes(first.card.memory_bytes), first.card.memory_source,
      alloc_conf_text(first.allocator).empty() ? "" : " (" + alloc_conf_text(first.allocator) + ")",
      allocator_limit_text(first));
  for (const auto& [setting, p] : rows) {
    md += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {} | {:.1f} | {} | {} |\n", setting,
                      p.batch_size, to_mib(p.figures().peak_allocated),
                      to_mib(p.figures().peak_reserved), to_mib(p.device_bytes()), p.fits_text(),
                      to_mib(p.margin()), p.largest_batch_text(),
                      p.speed ? rate_text(p.speed->images_per_second()) : "-");
  }
  md += fmt::format(
      "\nHeld beside the step: {} prefetched batch(es) (data.prefetch){}. Modelled: the "
      "allocator's rounding, pools, segments, best-fit reuse, splitting and merging, its "
      "retries; the cuBLAS workspaces ({} x {}). Not modelled: cuDNN's workspaces (one per "
      "convolution, taken from the allocator and freed after it; an engine whose workspace "
      "cannot be had is skipped for the next, so they do not decide whether a setting fits, but "
      "they raise the allocated peak where memory is free: docs/memory-studies.md), allocations "
      "on other streams, and what an operation allocates and frees inside itself (the stream "
      "holds the tensors that cross operations, the same from any CPU; with checkpointing the "
      "card's own temporaries inside a recomputed block's backward put the H200's measured peak "
      "above the prediction: docs/memory-studies.md). Each allocation's size is taken as linear "
      "in the batch from batches {} and {}, checked on batch {}.\n",
      first.held.prefetched_batches,
      first.held.resident.empty()
          ? ""
          : fmt::format("; data.device_resident's splits and epoch order, {}",
                        format_bytes(first.held.resident_bytes())),
      first.beside.workspaces, format_bytes(first.beside.cublas_workspace), kTraceBatches[0],
      kTraceBatches[1], kTraceBatches[2]);
  return md + speed_markdown(rows);
}

}  // namespace training
