// Timings of the unmodified e2b SDK for BenchmarkE2B (bench_test.go). It
// reads {apiUrl, sandboxUrl, key, id, mode, n} from stdin, connects to the
// running sandbox id, warms up once, then times n round trips of mode
// ("run": commands.run('true'); "files": files.write of 1 MiB, then
// files.read of it as bytes) and prints {"ms": [...]}.
import { Sandbox } from "e2b";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { apiUrl, sandboxUrl, key, id, mode, n } = JSON.parse(input);
const sbx = await Sandbox.connect(id, { apiKey: key, apiUrl, sandboxUrl, requestTimeoutMs: 120_000 });

const data = new Uint8Array(1 << 20);
for (let i = 0; i < data.length; i++) data[i] = i % 251;
const ops = {
  run: async () => {
    const res = await sbx.commands.run("true");
    if (res.exitCode !== 0) throw new Error("true exited " + res.exitCode);
  },
  files: async () => {
    await sbx.files.write("/home/user/bench.bin", data);
    const back = await sbx.files.read("/home/user/bench.bin", { format: "bytes" });
    if (back.length !== data.length) throw new Error("read back " + back.length + " bytes");
  },
};
const op = ops[mode];
await op(); // warm
const ms = [];
for (let i = 0; i < n; i++) {
  const t = performance.now();
  await op();
  ms.push(performance.now() - t);
}
console.log(JSON.stringify({ ms }));
