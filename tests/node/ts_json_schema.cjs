// ts-json-schema-generator over many files in one process (tests/support/ts_reference.py).
// stdin: [{"path": "/abs/file.ts", "type": "Root"}, ...]; stdout: one JSON list, in order,
// of {"schema": {...}} or {"error": "..."}.
const tsj = require("ts-json-schema-generator");

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const out = JSON.parse(input).map(({ path, type }) => {
    try {
      const config = { path, type, skipTypeCheck: true };
      return { schema: tsj.createGenerator(config).createSchema(type) };
    } catch (error) {
      return { error: String(error && error.message ? error.message : error) };
    }
  });
  process.stdout.write(JSON.stringify(out));
});
