// A long tool result or message comes with the step page as its start only; its button fetches
// the whole text (GET .../tools/{i} or .../messages/{i}) and puts it in place of the start.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.fetch-full");
  if (!button || button.disabled) return;
  button.disabled = true;
  const label = button.textContent;
  button.textContent = "Loading…";
  try {
    const response = await fetch(button.dataset.url);
    const text = await response.text();
    if (!response.ok) throw new Error(text);
    const pre = button.parentElement.querySelector("pre");
    pre.textContent = text;
    pre.tabIndex = 0;  // a long text scrolls: it can take the focus, so the keyboard can scroll it
    button.remove();
    pre.focus();
  } catch (error) {
    button.disabled = false;
    button.textContent = `${label} (failed: ${error.message || error}; try again)`;
  }
});
