// Unit tests of the panel's model code (plain TS modules: no DOM, no JupyterLab).
process.env.TZ = 'UTC';

module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src'],
  testRegex: '__tests__/.*\\.spec\\.ts$',
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: { module: 'commonjs', target: 'ES2020', strict: true, esModuleInterop: true, types: ['jest'] }, diagnostics: true }]
  }
};
