// What the SDK test scripts share: the client from the environment (TANDEM_BASE_URL,
// TANDEM_API_KEY, TANDEM_MODEL) and check(), which runs one named check and exits non-zero on
// its failure.
import OpenAI from 'openai';

export const baseURL = process.env.TANDEM_BASE_URL ?? 'http://127.0.0.1:8000/v1';
export const apiKey = process.env.TANDEM_API_KEY ?? 'none';
export const model = process.env.TANDEM_MODEL ?? 'tandem-demo';
export const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

export async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    console.error(`FAIL ${name}: ${e?.stack ?? e}`);
    process.exit(1);
  }
}
