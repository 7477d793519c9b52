#include "tools/common/trace_report.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "mcx/core/text_file.h"
#include "nlohmann/json.hpp"

namespace mcx::tools {
namespace {

using nlohmann::json;

constexpr size_t kMaxTimelineEvents = 300000;

// The page's script: draws the timeline, the step plots and the events table from DATA; sets #status.
constexpr const char* kRenderer = R"JS(
"use strict";
const status = document.getElementById("status");
window.onerror = (msg) => { status.textContent = "error: " + msg; };
const COLORS = {launch: "#4e79a7", collective: "#f28e2b", data: "#59a14f", compile: "#b07aa1",
                checkpoint: "#edc948", transfer: "#76b7b2", fault_tolerance: "#e15759"};
const color = (cat) => COLORS[cat] || "#9c9c9c";
function fmtMs(ms) { return ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : ms.toFixed(ms >= 10 ? 0 : 2) + " ms"; }
function setupCanvas(id, width, height) {
  const c = document.getElementById(id);
  const ratio = window.devicePixelRatio || 1;
  c.width = width * ratio; c.height = height * ratio;
  c.style.width = width + "px"; c.style.height = height + "px";
  const g = c.getContext("2d");
  g.scale(ratio, ratio);
  g.font = "12px sans-serif";
  return g;
}
function summary() {
  const s = document.getElementById("summary");
  const rows = [["processes", DATA.processes.length], ["duration", fmtMs(DATA.span_ms)],
                ["clock", DATA.clock + (DATA.max_clock_error_us >= 0 ? " (error <= " + DATA.max_clock_error_us + " us)" : " (error unknown)")],
                ["timeline events", DATA.events.length + (DATA.truncated ? " (the first " + DATA.events.length + " only)" : "")]];
  if (DATA.steps.program) rows.push(["step", DATA.steps.program]);
  for (const [k, v] of rows) {
    const tr = document.createElement("tr");
    tr.innerHTML = "<th></th><td></td>";
    tr.children[0].textContent = k; tr.children[1].textContent = v;
    s.appendChild(tr);
  }
}
function timeline() {
  const labelW = 260, width = Math.max(900, window.innerWidth - 40), laneH = 18, top = 22;
  const plotW = width - labelW - 10;
  const height = top + DATA.lanes.length * laneH + 10;
  const g = setupCanvas("timeline", width, height);
  const x = (ms) => labelW + (DATA.span_ms > 0 ? ms / DATA.span_ms : 0) * plotW;
  g.fillStyle = "#333";
  for (let i = 0; i <= 10; ++i) {
    const t = DATA.span_ms * i / 10;
    g.fillText(fmtMs(t), x(t) - (i === 10 ? 50 : 10), 12);
    g.fillStyle = "#eee"; g.fillRect(x(t), top - 4, 1, height - top); g.fillStyle = "#333";
  }
  DATA.lanes.forEach((lane, i) => {
    g.fillStyle = i % 2 ? "#fafafa" : "#f0f0f0";
    g.fillRect(labelW, top + i * laneH, plotW, laneH - 2);
    g.fillStyle = "#333";
    g.fillText(lane.label.slice(0, 40), 4, top + i * laneH + 12);
  });
  for (const [lane, cat, start, dur] of DATA.events) {
    g.fillStyle = color(DATA.categories[cat]);
    g.fillRect(x(start), top + lane * laneH + 2, Math.max(1, x(start + dur) - x(start)), laneH - 6);
  }
  for (const m of DATA.marks) {
    const lane = DATA.lanes.findIndex((l) => l.pid === m.pid);
    g.fillStyle = color(m.cat);
    g.fillRect(x(m.t), top + Math.max(0, lane) * laneH, 2, laneH * 2);
  }
  const legend = document.getElementById("legend");
  for (const cat of DATA.categories) {
    const span = document.createElement("span");
    span.className = "key";
    span.innerHTML = "<i></i>";
    span.firstChild.style.background = color(cat);
    span.appendChild(document.createTextNode(cat));
    legend.appendChild(span);
  }
}
function plot(id, series, yLabel) {
  const width = Math.max(900, window.innerWidth - 40), height = 220, left = 70, bottom = 30, top = 10;
  const g = setupCanvas(id, width, height);
  let maxY = 0;
  for (const s of series) for (const [, y] of s.points) maxY = Math.max(maxY, y);
  if (maxY === 0) maxY = 1;
  const x = (ms) => left + (DATA.span_ms > 0 ? ms / DATA.span_ms : 0) * (width - left - 10);
  const y = (v) => top + (1 - v / maxY) * (height - top - bottom);
  g.strokeStyle = "#999"; g.beginPath(); g.moveTo(left, top); g.lineTo(left, height - bottom);
  g.lineTo(width - 10, height - bottom); g.stroke();
  g.fillStyle = "#333";
  for (let i = 0; i <= 4; ++i) {
    const v = maxY * i / 4;
    g.fillText(v.toPrecision(3), 4, y(v) + 4);
  }
  g.fillText(yLabel, left + 6, top + 10);
  for (let i = 0; i <= 10; ++i) {
    g.fillText(fmtMs(DATA.span_ms * i / 10), x(DATA.span_ms * i / 10) - (i === 10 ? 50 : 10), height - 10);
  }
  const palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7"];
  series.forEach((s, i) => {
    g.strokeStyle = palette[i % palette.length]; g.beginPath();
    s.points.forEach(([px, py], k) => { if (k === 0) g.moveTo(x(px), y(py)); else g.lineTo(x(px), y(py)); });
    g.stroke();
    g.fillStyle = palette[i % palette.length];
    g.fillText(s.name, width - 220, top + 14 + 14 * i);
  });
}
function steps() {
  const byProcess = DATA.steps.starts;
  const timeSeries = [], rateSeries = [];
  for (const pid of Object.keys(byProcess)) {
    const starts = byProcess[pid];
    const name = DATA.processes.find((p) => String(p.pid) === pid)?.name || ("process " + pid);
    const points = [];
    for (let i = 1; i < starts.length; ++i) points.push([starts[i], starts[i] - starts[i - 1]]);
    timeSeries.push({name, points});
    const perSecond = new Map();
    for (const t of starts) perSecond.set(Math.floor(t / 1000), (perSecond.get(Math.floor(t / 1000)) || 0) + 1);
    const rate = [...perSecond.entries()].sort((a, b) => a[0] - b[0]).map(([sec, n]) => [sec * 1000 + 500, n]);
    rateSeries.push({name, points: rate});
  }
  plot("steptime", timeSeries, "ms per step");
  plot("throughput", rateSeries, "steps per second");
}
function events() {
  const t = document.getElementById("events");
  if (DATA.marks.length === 0) {
    t.innerHTML = "<tr><td>none</td></tr>";
    return;
  }
  t.innerHTML = "<tr><th>time</th><th>process</th><th>event</th><th>details</th></tr>";
  for (const m of DATA.marks) {
    const tr = document.createElement("tr");
    for (const v of [fmtMs(m.t), String(m.pid), m.name, JSON.stringify(m.args || {})]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.appendChild(td);
    }
    t.appendChild(tr);
  }
}
summary();
timeline();
steps();
events();
status.textContent = "rendered";
)JS";

constexpr const char* kStyle = R"CSS(
body { font-family: sans-serif; margin: 20px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; } th, td { text-align: left; padding: 3px 10px; border-bottom: 1px solid #ddd; }
.key { margin-right: 14px; font-size: 13px; } .key i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
#status { color: #888; font-size: 11px; margin-top: 30px; }
)CSS";

}  // namespace

absl::StatusOr<TraceReportSummary> write_job_report(const std::string& trace_path, const std::string& out_path) {
  absl::StatusOr<std::string> text = read_text_file(trace_path);
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat("[report] ", text.status().message()));
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("[report] ", trace_path, ": not JSON"));
  return write_job_report(doc, out_path);
}

absl::StatusOr<TraceReportSummary> write_job_report(const json& doc, const std::string& out_path) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return absl::InvalidArgumentError("[report] expected a trace (traceEvents)");
  }
  // Names of processes and threads; the first event time.
  std::map<int64_t, std::string> process_names;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  double t0 = -1, t1 = 0;
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "M") {
      const std::string label = e.contains("args") ? e["args"].value("name", "") : "";
      if (e.value("name", "") == "process_name") process_names[e.value("pid", int64_t{0})] = label;
      if (e.value("name", "") == "thread_name") thread_names[{e.value("pid", int64_t{0}), e.value("tid", int64_t{0})}] = label;
      continue;
    }
    const double ts = e.value("ts", 0.0);
    if (t0 < 0 || ts < t0) t0 = ts;
    t1 = std::max(t1, ts + e.value("dur", 0.0));
  }
  if (t0 < 0) t0 = 0;

  // The step program: the jit program launched most often (by any process).
  std::map<std::string, int64_t> launches;
  for (const json& e : doc["traceEvents"]) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") == "X" && e.value("cat", "") == "launch" && name.rfind("jit of '", 0) == 0) ++launches[name];
  }
  std::string step_program;
  int64_t most = 0;
  for (const auto& [name, n] : launches) {
    if (n > most) most = n, step_program = name;
  }

  std::map<std::pair<int64_t, int64_t>, int> lane_of;
  std::map<std::string, int> category_of;
  json lanes = json::array(), categories = json::array(), events = json::array(), marks = json::array();
  std::map<int64_t, int64_t> step_tid;  // per process: the thread of its first step launch
  std::map<int64_t, std::vector<double>> step_starts;
  std::vector<const json*> ordered;
  for (const json& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "M") ordered.push_back(&e);
  }
  std::sort(ordered.begin(), ordered.end(),
            [](const json* a, const json* b) { return a->value("ts", 0.0) < b->value("ts", 0.0); });
  bool truncated = false;
  for (const json* ep : ordered) {
    const json& e = *ep;
    const std::string ph = e.value("ph", ""), cat = e.value("cat", ""), name = e.value("name", "");
    const int64_t pid = e.value("pid", int64_t{0}), tid = e.value("tid", int64_t{0});
    const double start_ms = (e.value("ts", 0.0) - t0) / 1000.0;
    if (ph == "i") {
      marks.push_back({{"t", start_ms}, {"pid", pid}, {"cat", cat}, {"name", name},
                       {"args", e.contains("args") ? e["args"] : json::object()}});
      continue;
    }
    if (ph != "X") continue;
    if (cat == "launch" && name == step_program) {
      if (step_tid.try_emplace(pid, tid).first->second == tid) step_starts[pid].push_back(start_ms);
    }
    if (events.size() >= kMaxTimelineEvents) {
      truncated = true;
      continue;
    }
    const auto lane = lane_of.try_emplace({pid, tid}, static_cast<int>(lane_of.size())).first;
    auto [c, new_cat] = category_of.try_emplace(cat, static_cast<int>(category_of.size()));
    if (new_cat) categories.push_back(cat);
    events.push_back({lane->second, c->second, start_ms, e.value("dur", 0.0) / 1000.0});
  }
  // Lanes in process, then thread order (the events above numbered them as met).
  std::vector<std::pair<std::pair<int64_t, int64_t>, int>> lane_list(lane_of.begin(), lane_of.end());
  std::vector<int> renumber(lane_list.size());
  for (size_t i = 0; i < lane_list.size(); ++i) {
    renumber[lane_list[i].second] = static_cast<int>(i);
    const auto [pid, tid] = lane_list[i].first;
    const std::string pname = process_names.count(pid) ? process_names[pid] : absl::StrCat("process ", pid);
    const std::string tname = thread_names.count({pid, tid}) ? thread_names[{pid, tid}] : absl::StrCat("thread ", tid);
    lanes.push_back({{"pid", pid}, {"tid", tid}, {"label", absl::StrCat("p", pid, " ", tname)}, {"process", pname}});
  }
  for (json& e : events) e[0] = renumber[e[0].get<int>()];
  json processes = json::array();
  for (const auto& [pid, name] : process_names) processes.push_back({{"pid", pid}, {"name", name}});
  json starts = json::object();
  for (const auto& [pid, s] : step_starts) starts[std::to_string(pid)] = s;
  const json other = doc.value("otherData", json::object());
  const json data = {{"processes", processes},
                     {"lanes", lanes},
                     {"categories", categories},
                     {"events", events},
                     {"marks", marks},
                     {"truncated", truncated},
                     {"span_ms", (t1 - t0) / 1000.0},
                     {"clock", other.value("clock", std::string("one process's clock"))},
                     {"max_clock_error_us", other.value("max_clock_error_us", int64_t{0})},
                     {"steps", {{"program", step_program}, {"starts", starts}}}};
  // "</" inside the embedded JSON would end the script element early.
  const std::string embedded = absl::StrReplaceAll(data.dump(), {{"</", "<\\/"}});
  const std::string page = absl::StrCat(
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mcx job report</title><style>", kStyle,
      "</style></head>\n<body>\n<h1>mcx job report</h1>\n<table id=\"summary\"></table>\n"
      "<h2>Timeline</h2>\n<div id=\"legend\"></div>\n<canvas id=\"timeline\"></canvas>\n"
      "<h2>Step time</h2>\n<canvas id=\"steptime\"></canvas>\n<h2>Throughput</h2>\n<canvas id=\"throughput\"></canvas>\n"
      "<h2>Failures, recovery and checkpoints</h2>\n<table id=\"events\"></table>\n<div id=\"status\">loading</div>\n"
      "<script>const DATA = ", embedded, ";</script>\n<script>", kRenderer, "</script>\n</body></html>\n");
  if (absl::Status s = write_text_file(out_path, page); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("[report] ", s.message()));
  }
  TraceReportSummary summary;
  summary.out = out_path;
  summary.processes = static_cast<int>(process_names.size());
  summary.step_program = step_program;
  for (const auto& [pid, s] : step_starts) summary.steps = std::max<int64_t>(summary.steps, static_cast<int64_t>(s.size()));
  summary.timeline_events = static_cast<int64_t>(events.size());
  return summary;
}

}  // namespace mcx::tools
