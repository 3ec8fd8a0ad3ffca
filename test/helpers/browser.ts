// The e2e tests' browsers (instruments/fleet/chromium.ts launches them) and the client build they load
// (server/client-build.ts).

export {
  CHROMIUM_PATH,
  type LaunchOptions,
  type LaunchedBrowser,
  chromiumArgs,
  launchChromium,
} from '../../instruments/fleet/chromium.ts';
export { ensureClientBuild } from '../../server/client-build.ts';
