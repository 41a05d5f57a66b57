/**
 * UI tests of the GPU hive panel: plain @playwright/test on Debian's chromium (no browser
 * download), against a JupyterLab with the extension on a simulated 2-host cluster that
 * start_server.py starts. Screenshots and failure reports go to ui-tests/artifacts/.
 */
import { execFileSync } from 'child_process';
import * as path from 'path';
import { defineConfig } from '@playwright/test';

const PYTHON = process.env.PYTHON ?? path.resolve(__dirname, '../../.venv/bin/python');

// Free ports, chosen once in the main process (workers inherit the environment): the
// simulated cluster's server, a zero-config one (nvidia-smi on PATH) and an empty one.
function freePort(): string {
  return execFileSync(PYTHON, ['-c', "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"])
    .toString()
    .trim();
}
process.env.GPUHIVE_UI_PORT ??= freePort();
process.env.GPUHIVE_UI_PORT_ZERO ??= freePort();
process.env.GPUHIVE_UI_PORT_EMPTY ??= freePort();
// The demo-sized servers scale.spec.ts starts and stops itself (one at a time).
process.env.GPUHIVE_UI_PORT_SCALE ??= freePort();
process.env.GPUHIVE_UI_TOKEN ??= 'gpuhive-ui-test-token';
process.env.GPUHIVE_UI_BOB_TOKEN ??= 'gpuhive-ui-test-bob';
process.env.GPUHIVE_UI_ADMIN_TOKEN ??= 'gpuhive-ui-test-ada';
const PORT = process.env.GPUHIVE_UI_PORT;

/** One JupyterLab for the tests (start_server.py MODE); its log goes to ui-tests/artifacts/. */
function server(mode: string, port: string) {
  return {
    command: `"${PYTHON}" start_server.py ${mode}`,
    cwd: __dirname,
    url: `http://127.0.0.1:${port}/gpuhive/api/me?token=${process.env.GPUHIVE_UI_TOKEN}`,
    timeout: 180_000,
    reuseExistingServer: false,
    stdout: 'pipe' as const,
    stderr: 'pipe' as const
  };
}

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
  webServer: [
    server('sim', PORT),
    server('zeroconf', process.env.GPUHIVE_UI_PORT_ZERO),
    server('empty', process.env.GPUHIVE_UI_PORT_EMPTY)
  ]
});
