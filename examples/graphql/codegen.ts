// graphql-codegen's client preset: typed documents for typed.ts, from the schema the gateway
// serves at /graphql (discovered kinds included). Either from a file written by
//   kube-gateway schema --demo -o schema.graphql      (no gateway running; CI-friendly)
// or, with SCHEMA_URL set, by introspecting a running gateway (GATEWAY_TOKEN's identity).
import type { CodegenConfig } from "@graphql-codegen/cli";

const token = process.env.GATEWAY_TOKEN ?? "admin-token";
const schemaUrl = process.env.SCHEMA_URL;

const config: CodegenConfig = {
  schema: schemaUrl
    ? [{ [schemaUrl]: { headers: { Authorization: `Bearer ${token}` } } }]
    : "schema.graphql",
  documents: ["typed.ts"],
  ignoreNoDocuments: false,
  // `import ... from "./graphql.js"`: what Node's ES modules (module: nodenext) need
  emitLegacyCommonJSImports: false,
  generates: {
    "gql/": {
      preset: "client",
      config: {
        // Kubernetes' scalars as TypeScript sees them; any other one is `unknown`.
        scalars: {
          JSON: "any",
          Long: "number",
          Time: "string",
          MicroTime: "string",
          Quantity: "string",
          IntOrString: "string | number",
        },
        defaultScalarType: "unknown",
        enumsAsTypes: true,
        useTypeImports: true,
      },
      presetConfig: { fragmentMasking: false },
    },
  },
};
export default config;
