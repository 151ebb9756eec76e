// The E2B SDK conformance script (E2B.md B.5), run by TestE2BSDK with the
// unmodified e2b npm package. It reads {apiUrl, sandboxUrl, key, otherKey}
// from stdin (no secret in argv or the environment), runs each step,
// catching what it throws, and prints one JSON line of the results.
import { Sandbox, CommandExitError, FileNotFoundError, AuthenticationError, NotFoundError } from "e2b";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { apiUrl, sandboxUrl, key, otherKey } = JSON.parse(input);
const o = { apiKey: key, apiUrl, sandboxUrl, requestTimeoutMs: 120_000 };
const r = {};
const errName = (e) => (e && e.constructor ? e.constructor.name : typeof e) + ": " + (e && e.message);
const step = async (name, fn) => {
  try {
    r[name] = await fn();
  } catch (e) {
    r[name] = { error: errName(e), stack: String(e && e.stack) };
  }
};
// until waits for cond, polling, at most 60 s (a bound, not an assertion).
const until = async (cond) => {
  for (let i = 0; i < 600 && !cond(); i++) await new Promise((res) => setTimeout(res, 100));
  return cond();
};
const enc = (s) => new TextEncoder().encode(s);

let sbx;
await step("create", async () => {
  sbx = await Sandbox.create("base", { ...o, timeoutMs: 120_000, envs: { A: "1" }, metadata: { run: "x" } });
  return { id: sbx.sandboxId };
});
if (!sbx) {
  console.log(JSON.stringify(r));
  process.exit(0);
}
const id = sbx.sandboxId;

await step("run", async () => {
  let out = "", err = "";
  const res = await sbx.commands.run("echo $A; echo err >&2", { onStdout: (d) => (out += d), onStderr: (d) => (err += d) });
  return { out, err, stdout: res.stdout, stderr: res.stderr, exitCode: res.exitCode };
});
await step("exit3", async () => {
  try {
    await sbx.commands.run("exit 3");
    return { threw: false };
  } catch (e) {
    return { threw: true, isExitError: e instanceof CommandExitError, exitCode: e.exitCode };
  }
});
await step("background", async () => {
  const h = await sbx.commands.run("sleep 600", { background: true });
  const listed = (await sbx.commands.list()).some((p) => p.pid === h.pid);
  const killed = await h.kill();
  let waitRejected = false;
  try {
    await h.wait();
  } catch (e) {
    waitRejected = true;
  }
  const killedAgain = await sbx.commands.kill(h.pid);
  return { pid: h.pid, listed, killed, waitRejected, killedAgain };
});
await step("stdin", async () => {
  const h = await sbx.commands.run("cat", { background: true, stdin: true });
  await sbx.commands.sendStdin(h.pid, "hello stdin\n");
  await sbx.commands.closeStdin(h.pid);
  const res = await h.wait();
  return { stdout: res.stdout, exitCode: res.exitCode };
});
await step("files", async () => {
  const out = {};
  await sbx.files.write("/home/user/a.txt", "hi");
  out.read = await sbx.files.read("/home/user/a.txt");
  out.mkdir1 = await sbx.files.makeDir("/home/user/d");
  out.mkdir2 = await sbx.files.makeDir("/home/user/d");
  out.list = (await sbx.files.list("/home/user")).map((e) => ({ name: e.name, type: e.type, path: e.path }));
  const moved = await sbx.files.rename("/home/user/a.txt", "/home/user/b.txt");
  out.movedPath = moved.path;
  out.existsB = await sbx.files.exists("/home/user/b.txt");
  out.existsA = await sbx.files.exists("/home/user/a.txt");
  await sbx.files.remove("/home/user/b.txt");
  out.existsAfterRemove = await sbx.files.exists("/home/user/b.txt");
  try {
    await sbx.files.read("/nope");
    out.readMissing = "no error";
  } catch (e) {
    out.readMissing = e instanceof FileNotFoundError ? "FileNotFoundError" : errName(e);
  }
  const big = new Uint8Array(5 << 20);
  for (let i = 0; i < big.length; i++) big[i] = i % 251;
  await sbx.files.write("/home/user/big.bin", big, { useOctetStream: true });
  out.bigSize = (await sbx.files.getInfo("/home/user/big.bin")).size;
  const back = await sbx.files.read("/home/user/big.bin", { format: "bytes" });
  out.bigSame = back.length === big.length && back.every((b, i) => b === big[i]);
  return out;
});
await step("watch", async () => {
  const evs = [];
  const w = await sbx.files.watchDir("/home/user/d", (ev) => evs.push({ name: ev.name, type: ev.type }));
  await sbx.files.write("/home/user/d/x", "1");
  await until(() => evs.some((e) => e.name === "x"));
  await w.stop();
  return { events: evs };
});
await step("pty", async () => {
  let out = "";
  const dec = new TextDecoder();
  const p = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d, { stream: true })) });
  await sbx.pty.sendInput(p.pid, enc("stty size\n"));
  const first = await until(() => out.includes("24 80"));
  await sbx.pty.resize(p.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(p.pid, enc("stty size\n"));
  const second = await until(() => out.includes("30 100"));
  const killed = await sbx.pty.kill(p.pid);
  return { first, second, killed, out: out.slice(-400) };
});
await step("setTimeout", async () => {
  const before = (await sbx.getInfo()).endAt;
  await sbx.setTimeout(300_000);
  const after = (await sbx.getInfo()).endAt;
  return { before: before.toISOString(), after: after.toISOString(), moved: after > before };
});
await step("list", async () => {
  const items = await Sandbox.list({ ...o, query: { metadata: { run: "x" } } }).nextItems();
  const none = await Sandbox.list({ ...o, query: { metadata: { run: "other" } } }).nextItems();
  const mine = items.find((s) => s.sandboxId === id);
  return { found: !!mine, state: mine && mine.state, metadata: mine && mine.metadata, otherCount: none.length };
});
await step("connect", async () => {
  const c = await Sandbox.connect(id, o);
  const res = await c.commands.run("echo connected");
  return { id: c.sandboxId, stdout: res.stdout };
});
// Pause, then connect resumes (E2B.md B.5 step 9): a background process
// started before the pause is still there after it.
await step("pause", async () => {
  const out = {};
  const bg = await sbx.commands.run("sleep 600", { background: true });
  out.first = await sbx.pause();
  out.second = await sbx.pause();
  const paused = await Sandbox.list({ ...o, query: { state: ["paused"] } }).nextItems();
  out.listedPaused = paused.some((s) => s.sandboxId === id);
  const running = await Sandbox.list({ ...o, query: { state: ["running"] } }).nextItems();
  out.listedRunning = running.some((s) => s.sandboxId === id);
  out.infoState = (await Sandbox.getInfo(id, o)).state;
  out.runWhilePaused = await sbx.commands.run("true").then(() => "no error", (e) => errName(e));
  const raw = await fetch(apiUrl + "/v2/sandboxes/" + id + "/connect", {
    method: "POST",
    headers: { "X-API-KEY": key, "Content-Type": "application/json" },
    body: JSON.stringify({ timeout: 300 }),
  });
  out.connectStatus = raw.status;
  const again = await fetch(apiUrl + "/v2/sandboxes/" + id + "/connect", {
    method: "POST",
    headers: { "X-API-KEY": key, "Content-Type": "application/json" },
    body: JSON.stringify({ timeout: 300 }),
  });
  out.connectAgainStatus = again.status;
  out.repaused = await sbx.pause();
  const c = await Sandbox.connect(id, o);
  out.infoStateAfter = (await Sandbox.getInfo(id, o)).state;
  const res = await c.commands.run("true");
  out.exitCode = res.exitCode;
  out.bgListed = (await c.commands.list()).some((p) => p.pid === bg.pid);
  out.bgKilled = await c.commands.kill(bg.pid);
  return out;
});
await step("negative", async () => {
  const out = {};
  try {
    await Sandbox.list({ ...o, apiKey: "stk_wrong_key" }).nextItems();
    out.wrongKey = "no error";
  } catch (e) {
    out.wrongKey = e instanceof AuthenticationError ? "AuthenticationError" : errName(e);
  }
  out.otherTenantKill = await Sandbox.kill(id, { ...o, apiKey: otherKey });
  try {
    await Sandbox.getInfo(id, { ...o, apiKey: otherKey });
    out.otherTenantInfo = "no error";
  } catch (e) {
    out.otherTenantInfo = e instanceof NotFoundError ? "NotFoundError" : errName(e);
  }
  const raw = await fetch(apiUrl + "/sandboxes/" + id, { headers: { "X-API-KEY": otherKey } });
  out.otherTenantRaw = { status: raw.status, body: await raw.json() };
  // Sandbox A's access token with sandbox B's id.
  const b = await Sandbox.create("base", { ...o, timeoutMs: 120_000 });
  const call = (sandboxId, token) =>
    fetch(sandboxUrl + "/process.Process/List", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Connect-Protocol-Version": "1", "E2b-Sandbox-Id": sandboxId, "X-Access-Token": token },
      body: "{}",
    }).then(async (res) => ({ status: res.status, body: await res.text() }));
  out.crossToken = await call(b.sandboxId, sbx.envdAccessToken);
  out.ownToken = await call(id, sbx.envdAccessToken);
  out.crossFiles = (await fetch(sandboxUrl + "/files?path=/etc/hostname", { headers: { "E2b-Sandbox-Id": b.sandboxId, "X-Access-Token": sbx.envdAccessToken } })).status;
  out.rootUser = await sbx.commands.run("id", { user: "root" }).then(() => "no error", (e) => errName(e));
  out.killB = await b.kill();
  return out;
});
await step("kill", async () => {
  const killed = await sbx.kill();
  const again = await Sandbox.kill(id, o);
  const running = await sbx.isRunning();
  const run = await sbx.commands.run("true").then(() => "no error", (e) => errName(e));
  return { killed, again, running, run };
});
await step("wrongPort", async () => {
  try {
    await Sandbox.list({ ...o, apiUrl: "http://127.0.0.1:9/e2b" }).nextItems();
    return { error: "no error" };
  } catch (e) {
    return { error: errName(e) };
  }
});
console.log(JSON.stringify(r));
