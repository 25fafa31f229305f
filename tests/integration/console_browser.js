// A headless Chromium driven by playwright-core, for tests/integration/test_console_browser.py.
// One JSON command per line on stdin, one JSON answer per line on stdout:
//   {"op": "open", "url": ..., "user": ..., "password": ...}   HTTP Basic, as a person would
//   {"op": "reload"}
//   {"op": "rows", "selector": "tr.task"}      -> [{"class": ..., "fields": {data-field: text}}]
//   {"op": "attrs", "selector": ..., "name": ...}  -> [value, ...]
//   {"op": "wait", "selector": ..., "timeout_ms": N}  (the page reloads itself meanwhile)
//   {"op": "screenshot", "path": ...}
//   {"op": "close"}
// Errors answer {"error": message}. CHROMIUM names the browser (default /usr/bin/chromium).
const { chromium } = require("playwright-core");
const readline = require("readline");

let browser = null;
let page = null;

async function handle(cmd) {
  switch (cmd.op) {
    case "open": {
      browser = await chromium.launch({
        executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
        args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
      });
      const context = await browser.newContext({
        httpCredentials: { username: cmd.user, password: cmd.password },
        viewport: { width: 1400, height: 1000 },
      });
      page = await context.newPage();
      const response = await page.goto(cmd.url);
      return { status: response.status() };
    }
    case "reload": {
      const response = await page.reload();
      return { status: response.status() };
    }
    case "rows":
      return await page.$$eval(cmd.selector, (rows) =>
        rows.map((row) => ({
          class: row.className,
          fields: Object.fromEntries(
            [...row.querySelectorAll("[data-field]")].map((c) => [c.dataset.field, c.textContent])
          ),
        }))
      );
    case "attrs":
      return await page.$$eval(cmd.selector, (els, name) => els.map((e) => e.getAttribute(name)), cmd.name);
    case "wait":
      await page.waitForSelector(cmd.selector, { timeout: cmd.timeout_ms });
      return { found: true };
    case "screenshot":
      await page.screenshot({ path: cmd.path, fullPage: true });
      return { path: cmd.path };
    case "close":
      if (browser) await browser.close();
      return { closed: true };
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = readline.createInterface({ input: process.stdin });
(async () => {
  for await (const line of lines) {
    let answer;
    try {
      answer = { ok: await handle(JSON.parse(line)) };
    } catch (e) {
      answer = { error: String(e && e.message ? e.message : e) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  }
  if (browser) await browser.close();
})();
