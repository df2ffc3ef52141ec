"""A basic accessibility check of a page in a real browser (Playwright), with no downloads: what
a keyboard user and a screen reader need first. `problems(page)` lists what fails, empty when
the page passes:

- the document names its language and has exactly one h1;
- every visible action (link, button, form control, summary) is in the Tab order: none has
  tabindex=-1, and pressing Tab from the top focuses each of them (what a closed <details> folds
  away is not visible);
- every visible form control has an accessible name (a <label>, aria-label or aria-labelledby),
  and every link and button has text;
- every status badge (`.status`) carries its status as text, not only as a colour.
"""

from __future__ import annotations

from typing import Any

ACTIONS = "a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]"

# Marks each visible action with data-a11y (its index) and reports what the DOM alone shows.
_SURVEY = """(selector) => {
  // Inside a closed <details> (but its own summary) is not shown: Chrome still lays it out.
  const folded = (el) => {
    for (let d = el.parentElement?.closest("details"); d; d = d.parentElement?.closest("details")) {
      if (!d.open && !(el.tagName === "SUMMARY" && el.parentElement === d)) return true;
    }
    return false;
  };
  const visible = (el) => !el.closest("[hidden]") && !folded(el) && el.getClientRects().length > 0
    && getComputedStyle(el).visibility !== "hidden";
  const problems = [];
  const lang = document.documentElement.getAttribute("lang");
  if (!lang || !lang.trim()) problems.push("the <html> element has no lang");
  const h1s = document.querySelectorAll("h1").length;
  if (h1s !== 1) problems.push(`the page has ${h1s} h1 elements, not one`);
  const describe = (el) => `<${el.tagName.toLowerCase()}${el.id ? " id=" + el.id : ""}> ${
    (el.textContent || el.getAttribute("name") || "").trim().slice(0, 40)}`;
  const nameOf = (el) => {
    if (el.getAttribute("aria-label")) return el.getAttribute("aria-label").trim();
    const by = el.getAttribute("aria-labelledby");
    if (by) return by.split(/\\s+/).map((id) => document.getElementById(id)?.textContent || "").join(" ").trim();
    if (el.labels && el.labels.length) return [...el.labels].map((l) => l.textContent).join(" ").trim();
    return "";
  };
  let index = 0;
  for (const el of document.querySelectorAll(selector)) {
    if (!visible(el) || el.disabled) continue;
    if (el.getAttribute("tabindex") === "-1") problems.push(`${describe(el)} has tabindex=-1`);
    if (["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName)) {
      if (!nameOf(el)) problems.push(`${describe(el)} has no label`);
    } else if (["A", "BUTTON", "SUMMARY"].includes(el.tagName) && !nameOf(el) && !el.textContent.trim()) {
      problems.push(`${describe(el)} has no text`);
    }
    el.dataset.a11y = String(index++);
  }
  for (const badge of document.querySelectorAll(".status")) {
    const status = [...badge.classList].find((c) => c.startsWith("status-"))?.slice(7).replaceAll("_", " ");
    if (!badge.textContent.includes(status || "\\u0000")) {
      problems.push(`a status badge shows ${status} by colour only (its text: ${badge.textContent.trim()})`);
    }
  }
  return { problems, actions: index };
}"""


async def problems(page: Any) -> list[str]:
    """What keeps `page` (a Playwright page, loaded) from passing the basic check; [] when it passes."""
    survey = await page.evaluate(_SURVEY, ACTIONS)
    found: list[str] = list(survey["problems"])
    count = survey["actions"]
    await page.evaluate("() => { document.activeElement?.blur(); window.scrollTo(0, 0); }")
    reached: set[str] = set()
    for _ in range(2 * count + 5):  # the Tab order, from the top; it may wrap through the browser once
        await page.keyboard.press("Tab")
        mark = await page.evaluate("() => document.activeElement?.dataset?.a11y ?? null")
        if mark is not None:
            reached.add(mark)
        if len(reached) == count:
            break
    missed = sorted(set(map(str, range(count))) - reached, key=int)
    if missed:
        names = await page.evaluate(
            "(marks) => marks.map((m) => document.querySelector(`[data-a11y='${m}']`)?.outerHTML.slice(0, 80))",
            missed[:5],
        )
        found.append(f"{len(missed)} of {count} actions are not reached by Tab, e.g. {names}")
    return found
