// The console opened by a one-time link, typing no token: the tab that
// opens LINK has a session (the API answers it, a reload keeps it), the
// code is gone from its address; a second tab opening the same link is
// refused in words; a new tab without the link asks for the token.
//
// Environment: as open_page.cjs, and LINK (the link `console-link` gave).
"use strict";
const { launch, watchErrors, WAIT } = require("./open_page.cjs");

const HARNESSES = () => document.querySelectorAll("#harness option").length > 0;
const notes = (page) => page.evaluate(() => [...document.querySelectorAll(".page-note")].map((e) => e.textContent));
const storage = (page) => page.evaluate(() => ({ local: { ...localStorage }, session: { ...sessionStorage } }));

(async () => {
  const out = { console_errors: [] };
  const browser = await launch();
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    watchErrors(page, out);
    await page.goto(process.env.LINK);
    await page.waitForFunction(HARNESSES, null, WAIT);
    out.address = page.url();
    out.notes = await notes(page);
    out.storage = await storage(page);
    await page.reload();
    await page.waitForFunction(HARNESSES, null, WAIT);
    out.after_reload = { address: page.url(), notes: await notes(page) };

    // The same link in a second tab: used already.
    const second = await context.newPage();
    await second.goto(process.env.LINK);
    await second.waitForFunction(() => [...document.querySelectorAll(".page-note")].some((e) => e.textContent.startsWith("401")), null, WAIT);
    out.second = { address: second.url(), notes: await notes(second), storage: await storage(second),
      harnesses: await second.evaluate(() => document.querySelectorAll("#harness option").length) };

    // A new tab, no link: the session is the first tab's only.
    const third = await context.newPage();
    await third.goto(process.env.URL);
    await third.waitForFunction(() => [...document.querySelectorAll(".page-note")].some((e) => e.textContent.startsWith("401")), null, WAIT);
    out.third = { notes: await notes(third), storage: await storage(third) };
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
})().catch((e) => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
