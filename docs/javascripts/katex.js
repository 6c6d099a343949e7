// Render the equations that pymdownx.arithmatex (generic mode) leaves as \( … \) and \[ … \],
// with the KaTeX copy kept in docs/assets/katex: the site needs no network.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
  });
});
