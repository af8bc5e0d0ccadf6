// Reads a legged_wbc MCAP bag with the parsers the Foxglove app uses (@mcap/core's indexed reader,
// @mcap/support's decompression handlers, @foxglove/rosmsg's ros2msg parser, @foxglove/rosmsg2-serialization's
// CDR reader), decodes every message of every topic, and resolves every message path of a Foxglove layout
// (config/foxglove_layout.json) against the decoded messages: a plot path must give a number, a 3D panel's
// frames must be on /tf or /tf_static and its URDF topic must hold a URDF, a diagnostics panel's topic must
// hold DiagnosticArrays naming the selected status.
//
//   node check_bag.mjs BAG.mcap LAYOUT.json   -> one JSON summary on stdout; exit status 1 on any failure
import { open } from "node:fs/promises";
import { McapIndexedReader } from "@mcap/core";
import { loadDecompressHandlers } from "@mcap/support";
import { parse } from "@foxglove/rosmsg";
import { MessageReader } from "@foxglove/rosmsg2-serialization";
import { readFile } from "node:fs/promises";

const [bagPath, layoutPath] = process.argv.slice(2);
if (!bagPath || !layoutPath) {
  console.error("usage: node check_bag.mjs BAG.mcap LAYOUT.json");
  process.exit(2);
}

const fh = await open(bagPath, "r");
const readable = {
  size: async () => BigInt((await fh.stat()).size),
  read: async (offset, size) => {
    const buf = new Uint8Array(Number(size));
    await fh.read(buf, 0, Number(size), Number(offset));
    return buf;
  },
};
const reader = await McapIndexedReader.Initialize({ readable, decompressHandlers: await loadDecompressHandlers() });
const failures = [];
const topics = {};
const readers = new Map();
for (const [id, ch] of reader.channelsById) {
  const schema = reader.schemasById.get(ch.schemaId);
  topics[ch.topic] = { type: schema.name, count: 0, trailing: 0, topic_type_hash: ch.metadata.get("topic_type_hash") ?? null };
  if (schema.encoding !== "ros2msg" || ch.messageEncoding !== "cdr") {
    failures.push(`${ch.topic}: schema encoding ${schema.encoding} / message encoding ${ch.messageEncoding}`);
    continue;
  }
  readers.set(id, new MessageReader(parse(new TextDecoder().decode(schema.data), { ros2: true })));
}
const compressions = [...new Set(reader.chunkIndexes.map((c) => c.compression || "none"))];
const samples = {}; // topic -> a few decoded messages (first, middle, last)
const all = {}; // topic -> decoded messages (the small topics only)
for await (const m of reader.readMessages()) {
  const ch = reader.channelsById.get(m.channelId);
  const r = readers.get(m.channelId);
  if (!r) continue;
  const t = topics[ch.topic];
  let msg;
  try {
    msg = r.readMessage(m.data);
  } catch (err) {
    if (!t.error) failures.push(`${ch.topic}: message ${t.count} does not decode: ${err.message}`);
    t.error = String(err.message);
    continue;
  }
  if (r.lastReadHadTrailingBytes()) t.trailing += 1;
  t.count += 1;
  (samples[ch.topic] ??= []).push(msg);
  if (samples[ch.topic].length > 3) samples[ch.topic].splice(1, 1); // keep the first and the newest
  if (["/tf", "/tf_static", "/robot_description", "/diagnostics"].includes(ch.topic)) (all[ch.topic] ??= []).push(msg);
}
await fh.close();

// ---- message paths (the subset of Foxglove's syntax the layout uses: fields, [index], .@rpy, .@degrees)
function quatToRpy(q) {
  const { x, y, z, w } = q;
  return {
    roll: Math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
    pitch: Math.asin(Math.max(-1, Math.min(1, 2 * (w * y - z * x)))),
    yaw: Math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)),
  };
}
function resolve(path) {
  const m = /^(\/[A-Za-z0-9_/]+?)((?:\.|\[).*)?$/.exec(path);
  if (!m) return { ok: false, why: "not a message path" };
  let topic = m[1];
  let rest = m[2] ?? "";
  // the topic is the longest prefix that is a topic of the bag
  while (!(topic in topics) && topic.includes("/", 1)) {
    const i = topic.lastIndexOf("/");
    rest = topic.slice(i).replace("/", ".") + rest;
    topic = topic.slice(0, i);
  }
  if (!(topic in topics)) return { ok: false, why: `topic ${m[1]} not in the bag` };
  const tokens = [...rest.matchAll(/\.(@?[A-Za-z_][A-Za-z0-9_]*)|\[(-?\d+)\]/g)].map((t) => t[1] ?? Number(t[2]));
  const values = [];
  for (const msg of samples[topic] ?? []) {
    let v = msg;
    for (const tok of tokens) {
      if (v === undefined || v === null) break;
      if (tok === "@rpy") v = quatToRpy(v);
      else if (tok === "@degrees") v = (v * 180) / Math.PI;
      else if (typeof tok === "number") v = v[tok < 0 ? v.length + tok : tok];
      else v = v[tok];
    }
    values.push(v);
  }
  if (!values.length) return { ok: false, why: `${topic} has no message` };
  const bad = values.filter((v) => typeof v !== "number" && typeof v !== "boolean" && typeof v !== "bigint");
  return bad.length ? { ok: false, why: `gives ${JSON.stringify(bad[0])}` } : { ok: true, sample: Number(values[0]) };
}

const layout = JSON.parse(await readFile(layoutPath, "utf8"));
const paths = {};
const panels = {};
const frames = new Set();
for (const key of ["/tf_static", "/tf"]) {
  for (const m of all[key] ?? []) for (const tr of m.transforms) { frames.add(tr.header.frame_id); frames.add(tr.child_frame_id); }
}
for (const [id, cfg] of Object.entries(layout.configById)) {
  const kind = id.split("!")[0];
  const problems = [];
  for (const p of cfg.paths ?? []) {
    const v = p.value ?? "";
    if (v === "" || !Number.isNaN(Number(v))) continue; // a constant line
    paths[v] = resolve(v);
    if (!paths[v].ok) problems.push(`${v}: ${paths[v].why}`);
  }
  if (cfg.topicPath) {
    paths[cfg.topicPath] = cfg.topicPath in topics ? { ok: true } : { ok: false, why: "topic not in the bag" };
    if (!paths[cfg.topicPath].ok) problems.push(`${cfg.topicPath}: not in the bag`);
  }
  if (kind === "3D") {
    for (const f of [cfg.followTf].filter(Boolean)) {
      if (!frames.has(f)) problems.push(`followTf ${f} is not a frame on /tf or /tf_static`);
    }
    for (const [topic, tcfg] of Object.entries(cfg.topics ?? {})) {
      if (tcfg.visible === false) continue;
      if (!(topic in topics)) problems.push(`topic ${topic} not in the bag`);
    }
    const urdfLayers = Object.values(cfg.layers ?? {}).filter((l) => l.layerId === "foxglove.Urdf");
    for (const l of urdfLayers) {
      const topic = l.topic ?? "/robot_description";
      const desc = (all[topic] ?? [])[0];
      if (!desc || !/<robot[\s>]/.test(desc.data ?? "")) problems.push(`URDF layer: ${topic} holds no URDF`);
      else {
        const links = [...desc.data.matchAll(/<link\s+name="([^"]+)"/g)].map((x) => x[1]);
        const missing = links.filter((n) => !frames.has(n));
        if (missing.length) problems.push(`URDF links without a TF frame: ${missing.join(", ")}`);
      }
    }
    if (!urdfLayers.length) problems.push("no URDF layer");
  }
  if (kind === "DiagnosticStatusPanel" || kind === "DiagnosticSummary") {
    const topic = cfg.topicToRender ?? "/diagnostics";
    const names = new Set((all[topic] ?? []).flatMap((m) => m.status.map((s) => s.name)));
    if (!names.size) problems.push(`${topic}: no DiagnosticArray with a status`);
    if (cfg.selectedName && !names.has(cfg.selectedName)) problems.push(`status ${cfg.selectedName} not in ${topic}`);
  }
  panels[id] = problems.length ? problems : "ok";
  failures.push(...problems.map((x) => `${id}: ${x}`));
}
for (const [name, t] of Object.entries(topics)) if (t.count === 0 && !t.error) failures.push(`${name}: no message decoded`);
const out = { bag: bagPath, compressions, topics, paths, panels, frames: [...frames].sort(), failures };
console.log(JSON.stringify(out, null, 1));
process.exit(failures.length ? 1 : 0);
