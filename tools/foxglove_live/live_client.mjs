// A Foxglove WebSocket client built from Foxglove's own client library (@foxglove/ws-protocol's FoxgloveClient
// over a `ws` WebSocket opened with the subprotocol the server speaks, foxglove.sdk.v1), @foxglove/rosmsg's
// ros2msg parser and @foxglove/rosmsg2-serialization's CDR reader and writer: what the Foxglove app does with a
// live connection. It subscribes to every channel the server advertises (also those advertised later), decodes
// every /joint_states message and the first messages of every other channel, gets every parameter, sets one
// and reads it back, tries a refused set, publishes /cmd_vel (and one malformed message), and after SECONDS
// prints one JSON summary on stdout.
//
//   [PUBLISH_ANYWAY=1] node live_client.mjs ws://127.0.0.1:PORT SECONDS [PARAM VALUE BAD_VALUE]
//   exit status 1 if the connection failed or a message could not be decoded
import WebSocket from "ws";
import wsProtocol from "@foxglove/ws-protocol";
import { parse } from "@foxglove/rosmsg";
import rosmsg2 from "@foxglove/rosmsg2-serialization";

const { FoxgloveClient } = wsProtocol;
const { MessageReader, MessageWriter } = rosmsg2;

const [url, secondsArg, paramName, paramValue, badValue] = process.argv.slice(2);
if (!url || !secondsArg) {
  console.error("usage: node live_client.mjs ws://HOST:PORT SECONDS [PARAM VALUE BAD_VALUE]");
  process.exit(2);
}
const DECODE_FIRST = 20;               // messages decoded per channel (every one of /joint_states)
const out = { url, subprotocol: null, serverInfo: null, channels: {}, params: {}, statuses: [], failures: [],
              cmd_vel: { advertised: false, sent: 0, malformed_sent: 0 } };
const bySub = new Map();               // subscription id -> channel state
const ws = new WebSocket(url, ["foxglove.sdk.v1"]);
const client = new FoxgloveClient({ ws });

const timeout = setTimeout(() => finish(), Number(secondsArg) * 1000);
client.on("error", (e) => out.failures.push(`error: ${e?.message ?? e}`));
client.on("close", () => finish());
client.on("open", () => { out.subprotocol = ws.protocol; });
client.on("serverInfo", (info) => {
  out.serverInfo = { name: info.name, capabilities: info.capabilities, supportedEncodings: info.supportedEncodings };
  client.subscribeParameterUpdates(paramName ? [paramName] : []);
  client.getParameters([], "all");
  if (paramName) setTimeout(() => setParameter(), 1500);
  setTimeout(() => publishCmdVel(), 1000);
});
client.on("status", (s) => out.statuses.push(s.message));
client.on("time", (t) => { out.server_time_ns = String(t.timestamp); });
client.on("advertise", (channels) => {
  for (const ch of channels) {
    const state = { topic: ch.topic, schemaName: ch.schemaName, encoding: ch.encoding,
                    schemaEncoding: ch.schemaEncoding, count: 0, decoded: 0, first: null, last: null, reader: null };
    try {
      state.reader = new MessageReader(parse(ch.schema, { ros2: true }));
    } catch (e) {
      out.failures.push(`${ch.topic}: schema does not parse: ${e.message}`);
    }
    out.channels[ch.topic] = state;
    bySub.set(client.subscribe(ch.id), state);
  }
});
client.on("message", ({ subscriptionId, timestamp, data }) => {
  const st = bySub.get(subscriptionId);
  if (!st) return;
  st.count += 1;
  const t = BigInt(timestamp);
  if (st.first === null) st.first = t;
  st.last = t;
  if (st.reader && (st.decoded < DECODE_FIRST || st.topic === "/joint_states")) {
    try {
      const msg = st.reader.readMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      st.decoded += 1;
      if (st.decoded === 1) st.sample = summarize(st.topic, msg);
      else if (st.topic === "/tf" || st.topic === "/tf_static") {   // several publishers: every frame pair seen
        const seen = new Set(st.sample.transforms);
        for (const pair of summarize(st.topic, msg).transforms) seen.add(pair);
        st.sample.transforms = [...seen];
      }
    } catch (e) {
      out.failures.push(`${st.topic}: message ${st.count} does not decode: ${e.message}`);
    }
  }
});
client.on("parameterValues", ({ parameters, id }) => {
  if (id === "all") {
    out.params.count = parameters.length;
    out.params.names = parameters.map((p) => p.name);
  } else if (id === "set") {
    out.params.after_set = parameters.find((p) => p.name === paramName)?.value;
    client.getParameters([paramName], "get");
  } else if (id === "get") {
    out.params.got_back = parameters.find((p) => p.name === paramName)?.value;
    client.setParameters([{ name: paramName, value: Number(badValue), type: "float64" }], "bad");
  } else if (id === "bad") {
    out.params.after_bad = parameters.find((p) => p.name === paramName)?.value;
  } else {
    out.params.updates = (out.params.updates ?? 0) + 1;
  }
});

function setParameter() {
  out.params.name = paramName;
  client.setParameters([{ name: paramName, value: Number(paramValue), type: "float64" }], "set");
}

function publishCmdVel() {
  // PUBLISH_ANYWAY=1: advertise and send even to a server that does not offer clientPublish (what a hostile
  // client would do: the server must refuse it)
  if (!out.serverInfo?.capabilities?.includes("clientPublish") && process.env.PUBLISH_ANYWAY !== "1") return;
  const schema = "geometry_msgs/Vector3 linear\ngeometry_msgs/Vector3 angular\n" +
    "================================================================================\n" +
    "MSG: geometry_msgs/Vector3\nfloat64 x\nfloat64 y\nfloat64 z\n";
  const id = client.advertise({ topic: "/cmd_vel", encoding: "cdr", schemaName: "geometry_msgs/msg/Twist",
                                schema, schemaEncoding: "ros2msg" });
  out.cmd_vel.advertised = true;
  const writer = new MessageWriter(parse(schema, { ros2: true }));
  const data = writer.writeMessage({ linear: { x: 0.1, y: 0, z: 0 }, angular: { x: 0, y: 0, z: 0 } });
  const timer = setInterval(() => { client.sendMessage(id, data); out.cmd_vel.sent += 1; }, 100);
  setTimeout(() => { clearInterval(timer); client.sendMessage(id, new Uint8Array([0, 1, 0, 0, 7])); out.cmd_vel.malformed_sent += 1; },
             2000);
}

function summarize(topic, msg) {
  if (topic === "/joint_states") return { names: msg.name.length, position: msg.position.length,
                                          stamp: msg.header.stamp };
  if (topic === "/robot_description") return { chars: msg.data.length, robot: /<robot\s+name="([^"]+)"/.exec(msg.data)?.[1] };
  if (topic === "/tf" || topic === "/tf_static") return { transforms: msg.transforms.map((t) => `${t.header.frame_id}->${t.child_frame_id}`) };
  if (topic === "/cmd_vel") return msg;
  return { fields: Object.keys(msg) };
}

let done = false;
function finish() {
  if (done) return;
  done = true;
  clearTimeout(timeout);
  for (const st of Object.values(out.channels)) {
    delete st.reader;
    st.first = st.first === null ? null : String(st.first);
    st.last = st.last === null ? null : String(st.last);
  }
  if (!out.serverInfo) out.failures.push("no serverInfo: not connected");
  try { client.close(); } catch { /* closed already */ }
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(out.failures.length ? 1 : 0);
}
