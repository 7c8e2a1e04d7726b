#!/usr/bin/env node
// A tiny engine in another language: the late-data area (spec/late_data.md, OXL-R1..R18)
// written from the spec in plain Node.js (no packages), speaking spec/engine-protocol.md:
// one case per line on stdin, one answer per line on stdout.
//
//   eventtime-conformance run vectors --areas late_data --command "node examples/late_data_engine.js"
//
// What it covers: every late_data case whose numbers fit a JavaScript number (|n| < 2^53);
// it answers "unsupported" for the cases at the i64 ends (TR-2 saturation needs 64-bit
// integers) and for every other area. --fault=boundary makes an event exactly at its
// watermark late (OXL-R4 says on time): the deliberate bug the checker must catch.
"use strict";

const readline = require("readline");

const FAULT_BOUNDARY = process.argv.includes("--fault=boundary");
const TABLES = {
  events: ["batch", "seq", "source", "event_time", "watermark", "verdict", "lateness", "assigned_time", "channel"],
  side_outputs: ["batch", "channel", "position", "seq", "source", "event_time"],
  windows: ["batch", "seq", "source", "window_start", "window_end", "watermark", "count"],
  progress: ["batch", "on_time", "allowed_late", "reassigned", "dropped", "side_output", "open_windows"],
  errors: ["batch", "seq", "reason"],
};
const VERDICTS = ["on_time", "allowed_late", "reassigned", "dropped", "side_output"];
const SETTINGS = ["policy", "max_lateness", "channel", "window_size", "allowed_lateness"];

class InvalidConfig extends Error {}

function requireCount(name, value, minimum) {
  if (typeof value !== "number" || !Number.isInteger(value) || value < minimum) {
    throw new InvalidConfig(`${name} must be an integer >= ${minimum}, got ${JSON.stringify(value)}`);
  }
  return value;
}

// OXL-R15: the settings, refused before any item.
function readConfig(config) {
  const unknown = Object.keys(config).filter((k) => !SETTINGS.includes(k));
  if (unknown.length) throw new InvalidConfig(`unknown late_data settings ${unknown}`);
  const policy = "policy" in config ? config.policy : "Drop";
  if (!["Drop", "Reassign", "SideOutput"].includes(policy)) throw new InvalidConfig(`unknown policy ${policy}`);
  for (const [setting, owner] of [["max_lateness", "Reassign"], ["channel", "SideOutput"]]) {
    if (policy === owner && !(setting in config)) throw new InvalidConfig(`${owner} needs ${setting}`);
    if (policy !== owner && setting in config) throw new InvalidConfig(`${setting} is for ${owner} only`);
  }
  const out = { policy, maxLateness: null, channel: null, windowSize: null, allowedLateness: 0 };
  if (policy === "Reassign") out.maxLateness = requireCount("max_lateness", config.max_lateness, 0);
  if (policy === "SideOutput") {
    if (typeof config.channel !== "string" || config.channel === "") throw new InvalidConfig("empty channel");
    out.channel = config.channel;
  }
  if (config.window_size !== undefined && config.window_size !== null) {
    out.windowSize = requireCount("window_size", config.window_size, 1);
  } else if ("allowed_lateness" in config) {
    throw new InvalidConfig("allowed_lateness needs window_size");
  }
  out.allowedLateness = requireCount("allowed_lateness", "allowed_lateness" in config ? config.allowed_lateness : 0, 0);
  return out;
}

const sourceKey = (source) => (source === undefined || source === null ? "-" : String(source));
const floorMod = (a, n) => ((a % n) + n) % n;

class LateDataStream {
  constructor(config, snapshot) {
    this.config = config;
    // Everything that crosses a restart (OXL-R18) lives in this.state, which goes through JSON.
    this.state = snapshot
      ? JSON.parse(snapshot)
      : { clock: 0, watermarks: {}, windows: {}, counts: Object.fromEntries(VERDICTS.map((v) => [v, 0])), positions: {} };
    this.queues = new Map(); // OXL-R13: channel -> routed events, drained at every batch end
  }

  checkpoint() {
    return JSON.stringify(this.state);
  }

  // OXL-R10: a window closes once the watermark reaches end + allowed lateness.
  isOpen(windowEnd, now) {
    return now === null || now === undefined || now < windowEnd + this.config.allowedLateness;
  }

  itemError(item) {
    if (item.kind === "duplicate_seq") return "duplicate_seq"; // TR-15: a row whose seq another row shares
    if (!["event", "watermark", "clock"].includes(item.kind)) return "unsupported_item"; // OXL-R16
    if (item.kind === "event") return item.event_time === undefined ? "missing_event_time" : null;
    if (item.time === undefined) return "missing_time";
    if (item.kind === "clock") return item.time < this.state.clock ? "clock_went_backwards" : null; // TR-4
    const current = this.state.watermarks[sourceKey(item.source)];
    return current !== undefined && item.time < current ? "watermark_regressed" : null; // OXL-R3
  }

  runBatch(b, batch, out) {
    batch.forEach((item, seq) => {
      const error = this.itemError(item);
      if (error) out.errors.push([b, seq, error]);
      else if (item.kind === "clock") this.state.clock = item.time;
      else if (item.kind === "watermark") this.watermark(b, seq, item, out);
      else this.event(b, seq, item, out);
    });
    for (const [channel, routed] of this.queues) { // OXL-R14: drained at the end of every batch
      for (const [seq, source, eventTime] of routed) {
        const position = this.state.positions[channel] || 0;
        this.state.positions[channel] = position + 1;
        out.side_outputs.push([b, channel, position, seq, source, eventTime]);
      }
      this.queues.set(channel, []);
    }
    const counts = VERDICTS.map((v) => this.state.counts[v]);
    out.progress.push([b, ...counts, Object.keys(this.state.windows).length]); // OXL-R17
  }

  watermark(b, seq, item, out) {
    const key = sourceKey(item.source);
    this.state.watermarks[key] = item.time;
    const closed = Object.entries(this.state.windows)
      .filter(([, w]) => w.source === key && !this.isOpen(w.end, item.time)) // OXL-R12: own source only
      .sort(([, x], [, y]) => x.start - y.start);
    for (const [id, w] of closed) {
      delete this.state.windows[id];
      out.windows.push([b, seq, item.source ?? null, w.start, w.end, item.time, w.count]);
    }
  }

  decide(eventTime, watermark) {
    const late = watermark !== undefined && (FAULT_BOUNDARY ? eventTime <= watermark : eventTime < watermark); // OXL-R4
    if (!late) return { verdict: "on_time", lateness: null, assigned: eventTime, channel: null };
    const lateness = watermark - eventTime; // OXL-R5
    const { policy, maxLateness, channel } = this.config;
    if (policy === "Reassign" && lateness <= maxLateness) {
      return { verdict: "reassigned", lateness, assigned: watermark, channel: null }; // OXL-R7
    }
    if (policy === "SideOutput") return { verdict: "side_output", lateness, assigned: null, channel }; // OXL-R8
    return { verdict: "dropped", lateness, assigned: null, channel: null }; // OXL-R6, R7 over budget
  }

  event(b, seq, item, out) {
    const t = item.event_time;
    const source = item.source ?? null;
    const watermark = this.state.watermarks[sourceKey(item.source)];
    let d = this.decide(t, watermark);
    const size = this.config.windowSize;
    if (d.verdict !== "on_time" && size !== null) {
      const end = t - floorMod(t, size) + size;
      if (this.isOpen(end, watermark)) d = { verdict: "allowed_late", lateness: d.lateness, assigned: t, channel: null }; // OXL-R11
    }
    this.state.counts[d.verdict] += 1;
    out.events.push([b, seq, source, t, watermark ?? null, d.verdict, d.lateness, d.assigned, d.channel]);
    if (d.verdict === "side_output") {
      if (!this.queues.has(d.channel)) this.queues.set(d.channel, []);
      this.queues.get(d.channel).push([seq, source, t]);
    }
    if (d.assigned !== null && size !== null) { // OXL-R12: the window of the assigned time
      const start = d.assigned - floorMod(d.assigned, size);
      const id = `${sourceKey(item.source)}|${start}`;
      const w = this.state.windows[id] || { source: sourceKey(item.source), start, end: start + size, count: 0 };
      w.count += 1;
      this.state.windows[id] = w;
    }
  }
}

function runCase(c) {
  const config = readConfig(c.config);
  const out = Object.fromEntries(Object.keys(TABLES).map((t) => [t, []]));
  const restarts = new Set(c.restart_after || []);
  let stream = new LateDataStream(config);
  c.batches.forEach((batch, b) => {
    stream.runBatch(b, batch, out);
    if (restarts.has(b)) stream = new LateDataStream(config, stream.checkpoint()); // TR-5
  });
  return out;
}

function answer(line) {
  const c = JSON.parse(line);
  if (c.area !== "late_data") return { id: c.id, unsupported: "this example implements late_data only" };
  if (/\d{16,}/.test(line)) return { id: c.id, unsupported: "numbers beyond 2^53 (the i64 ends) need 64-bit integers" };
  try {
    return { id: c.id, tables: runCase(c) };
  } catch (e) {
    if (e instanceof InvalidConfig) return { id: c.id, error: { type: "InvalidConfig", message: e.message } };
    throw e;
  }
}

const input = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
input.on("line", (line) => {
  if (line.trim()) process.stdout.write(JSON.stringify(answer(line)) + "\n");
});
