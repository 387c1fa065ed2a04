"""The app in a real browser, shared by the browser tests, the benchmarks and the screenshots script:
`server` starts it, `page` drives Debian's Chromium through Playwright, `sessions` opens many at once."""
