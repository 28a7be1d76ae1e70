// The fault drills: a suite of their own (`npm run test:faults`), not part of `npm test`.
export default {
  files: ['test/faults/**/*.test.ts'],
  extensions: ['ts'],
  timeout: '10m',
  workerThreads: false,
  concurrency: 1,
};
