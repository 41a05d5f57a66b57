/**
 * UI tests of the GPU hive panel: plain @playwright/test on Debian's chromium (no browser
 * download), against a JupyterLab with the extension on a simulated 2-host cluster that
 * start_server.py starts. Screenshots and failure reports go to ui-tests/artifacts/.
 */
import { execFileSync } from 'child_process';
import * as path from 'path';
import { defineConfig } from '@playwright/test';

const PYTHON = process.env.PYTHON ?? path.resolve(__dirname, '../../.venv/bin/python');

// A free port, chosen once in the main process (workers inherit the environment).
if (!process.env.GPUHIVE_UI_PORT) {
  process.env.GPUHIVE_UI_PORT = execFileSync(PYTHON, [
    '-c',
    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
  ])
    .toString()
    .trim();
}
process.env.GPUHIVE_UI_TOKEN ??= 'gpuhive-ui-test-token';
process.env.GPUHIVE_UI_BOB_TOKEN ??= 'gpuhive-ui-test-bob';
const PORT = process.env.GPUHIVE_UI_PORT;

export default defineConfig({
  testDir: './tests',
  outputDir: './artifacts/test-results',
  timeout: 120_000,
  expect: { timeout: 30_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [['list']],
  use: {
    baseURL: `http://127.0.0.1:${PORT}`,
    video: 'off',
    trace: 'off',
    screenshot: 'only-on-failure',
    viewport: { width: 1280, height: 900 },
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync'
      ]
    }
  },
  webServer: {
    command: `"${PYTHON}" start_server.py`,
    cwd: __dirname,
    url: `http://127.0.0.1:${PORT}/gpuhive/api/me?token=${process.env.GPUHIVE_UI_TOKEN}`,
    timeout: 180_000,
    reuseExistingServer: false,
    // The server's own log goes to ui-tests/artifacts/server.log.
    stdout: 'pipe',
    stderr: 'pipe'
  }
});
